package node

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// KnativePlaceholder is the registry host of the images in the manifests that
	// `make cluster-env` keeps (hack/knative-images): the node's registry takes its place.
	KnativePlaceholder = "knative-images.invalid"
	// KnativeRepoAnnotation names, in the kept OCI layout, the repository of each image.
	KnativeRepoAnnotation = "dev.reflector.node.repository"
)

// KnativeDir is where `make cluster-env` keeps Knative's data-plane images and release
// manifests (hack/knative-images), under the binaries' directory.
func (c *Cluster) KnativeDir() string { return filepath.Join(c.bin, "knative-images") }

// KnativeManifests pushes the kept Knative images into the node's registry, by digest, and
// returns the kept release manifests by name ("serving", "eventing", ...), with the node's
// registry in their image references.
func (c *Cluster) KnativeManifests() (map[string]string, error) {
	dir := c.KnativeDir()
	lp, err := layout.FromPath(filepath.Join(dir, "layout"))
	if err != nil {
		return nil, fmt.Errorf("the Knative images are not built: run `make cluster-env` (%w)", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		repo := d.Annotations[KnativeRepoAnnotation]
		if repo == "" {
			return nil, fmt.Errorf("%s: image %s names no repository", dir, d.Digest)
		}
		ref, err := name.NewDigest(c.Registry.Host+"/"+repo+"@"+d.Digest.String(), name.Insecure)
		if err != nil {
			return nil, err
		}
		if d.MediaType.IsIndex() {
			ii, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if err := remote.WriteIndex(ref, ii); err != nil {
				return nil, fmt.Errorf("pushing %s: %w", ref, err)
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(ref, img); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = strings.ReplaceAll(string(b), KnativePlaceholder+"/", c.Registry.NodeHost+"/")
	}
	return out, nil
}

// Kubectl runs the node's kubectl inside its namespaces with the admin kubeconfig, with stdin
// (nil: none), and returns its standard output; an error carries its standard error.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	argv := c.NS.Wrap(append([]string{c.Bin("kubectl"), "--kubeconfig=" + c.Kubeconfig}, args...))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ApplyUntil runs `kubectl apply` with args (and stdin, nil for none) until it succeeds or
// within has passed: a release's or a kustomization's custom resources are refused until the
// apiserver serves the definitions applied a moment before, which is why Knative's installation
// says to apply twice. what names the manifests in the error.
func (c *Cluster) ApplyUntil(ctx context.Context, what string, within time.Duration, stdin []byte, args ...string) error {
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := c.Kubectl(actx, stdin, append([]string{"apply"}, args...)...)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		time.Sleep(2 * time.Second)
	}
}

//go:embed traefik.yaml
var traefikManifest string

// IngressClass is Traefik's Knative ingress class.
const IngressClass = "traefik.ingress.networking.knative.dev"

// KnativeDomain is the domain of the Routes' external hosts.
const KnativeDomain = "example.com"

// RouteTLS is the certificate and key (PEM) that Traefik serves for every Route's external
// host: one for the hosts of KnativeDomain, of a CA that the caller keeps.
type RouteTLS struct {
	Cert, Key []byte
}

// InstallKnative installs Knative Serving with Traefik as its KIngress, and Knative Eventing with
// the in-memory channel and the multi-tenant channel-based broker, from the images and
// manifests that `make cluster-env` kept, as their installation guides do: the release
// manifests, then the ingress class and the domain in Serving's config maps. Traefik
// terminates TLS for the Routes' external hosts with route's certificate, and Knative gives the
// Routes https URLs (default-external-scheme). It returns once every Deployment of
// knative-serving, knative-eventing and traefik is available.
func (c *Cluster) InstallKnative(ctx context.Context, route RouteTLS) error {
	if len(route.Cert) == 0 || len(route.Key) == 0 {
		return errors.New("InstallKnative: no certificate or key for the Routes")
	}
	manifests, err := c.KnativeManifests()
	if err != nil {
		return err
	}
	base, err := BaseImage()
	if err != nil {
		return err
	}
	traefik, err := LinkedProgramImage(base, c.Bin("traefik"), "traefik")
	if err != nil {
		return err
	}
	if c.Images["traefik"], err = c.Registry.Push(traefik, "traefik", "latest"); err != nil {
		return err
	}
	for _, name := range []string{"serving", "eventing", "in-memory-channel", "mt-channel-broker"} {
		m, ok := manifests[name]
		if !ok {
			return fmt.Errorf("%s has no %s.yaml: run `make cluster-env`", c.KnativeDir(), name)
		}
		if err := c.ApplyUntil(ctx, "Knative "+name, 3*time.Minute, []byte(m), "-f", "-"); err != nil {
			return err
		}
	}
	for _, patch := range [][]string{
		{"config-network", `{"data":{"ingress-class":"` + IngressClass + `","default-external-scheme":"https"}}`},
		{"config-domain", `{"data":{"` + KnativeDomain + `":""}}`},
	} {
		if _, err := c.Kubectl(ctx, nil, "patch", "configmap", patch[0], "-n", "knative-serving", "--type", "merge", "-p", patch[1]); err != nil {
			return err
		}
	}
	manifest := strings.NewReplacer("TRAEFIK_IMAGE", c.Images["traefik"],
		"ROUTE_TLS_CRT", base64.StdEncoding.EncodeToString(route.Cert),
		"ROUTE_TLS_KEY", base64.StdEncoding.EncodeToString(route.Key)).Replace(traefikManifest)
	if err := c.ApplyUntil(ctx, "Traefik", time.Minute, []byte(manifest), "-f", "-"); err != nil {
		return err
	}
	for _, ns := range []string{"knative-serving", "knative-eventing", "traefik"} {
		if err := c.WaitDeployments(ctx, ns, 6*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// WaitDeployments waits until every Deployment of namespace has all its replicas updated and
// available (a Deployment scaled to zero counts as available).
func (c *Cluster) WaitDeployments(ctx context.Context, namespace string, within time.Duration) error {
	return waitAPI(ctx, within, func(ctx context.Context) error {
		list, err := c.Clientset().AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no Deployment in %s yet", namespace)
		}
		for _, d := range list.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
				sel := metav1.FormatLabelSelector(d.Spec.Selector)
				return c.podTrouble(ctx, namespace, metav1.ListOptions{LabelSelector: sel},
					fmt.Errorf("deployment %s/%s: %d of %d available", namespace, d.Name, d.Status.AvailableReplicas, want))
			}
		}
		return nil
	})
}
