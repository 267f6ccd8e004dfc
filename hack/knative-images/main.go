// Command knative-images builds the images of Knative Serving's and Eventing's data planes with
// ko, from the module zips of knative.dev/serving and knative.dev/eventing, onto the node's base
// image (internal/node.BaseImage), and keeps them for the single-node cluster test: an OCI image
// layout of every image, and the release manifests that `ko resolve` wrote, in which each
// ko:// reference is a digest at the registry host Placeholder. The cluster test pushes the
// layout into the node's registry and puts the registry's address in place of the placeholder
// (internal/node.Knative), so the images are built once per version, not per test.
//
// ko pushes to a registry and pulls its base image from one, so this program serves a registry
// of its own on 127.0.0.1 for the build, and copies the images out of it when ko is done.
//
// Usage: knative-images -out DIR -ko KO NAME=MODULE_DIR:CONFIG_DIR[,CONFIG_DIR...] ...
// or knative-images -print-base, which prints the digest of the base image.
// Each NAME becomes DIR/NAME.yaml, built in MODULE_DIR (a module that requires the Knative
// module whose config directories are named).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/imagereflector/reflector/internal/node"
)

func main() {
	out := flag.String("out", "", "the directory to write (it must not exist; written whole or not at all)")
	ko := flag.String("ko", "ko", "the ko binary")
	printBase := flag.Bool("print-base", false, "print the base image's digest and exit: what the images are built on")
	flag.Parse()
	if *printBase {
		base, err := node.BaseImage()
		if err == nil {
			var d fmt.Stringer
			d, err = base.Digest()
			if err == nil {
				fmt.Println(d)
				return
			}
		}
		log.Fatalf("knative-images: %v", err)
	}
	if *out == "" || flag.NArg() == 0 {
		log.Fatal("usage: knative-images -out DIR -ko KO NAME=MODULE_DIR:CONFIG_DIR[,CONFIG_DIR...] ...")
	}
	if err := run(*out, *ko, flag.Args()); err != nil {
		log.Fatalf("knative-images: %v", err)
	}
}

func run(out, ko string, specs []string) error {
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	host := l.Addr().String()

	base, err := node.BaseImage()
	if err != nil {
		return err
	}
	baseRef, err := name.NewTag(host+"/base:latest", name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(baseRef, base); err != nil {
		return fmt.Errorf("pushing the base image: %w", err)
	}

	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	lp, err := layout.Write(filepath.Join(tmp, "layout"), empty.Index)
	if err != nil {
		return err
	}
	refs := map[string]bool{}
	for _, spec := range specs {
		nm, rest, ok := strings.Cut(spec, "=")
		mod, configs, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 {
			return fmt.Errorf("%q is not NAME=MODULE_DIR:CONFIG_DIR[,CONFIG_DIR...]", spec)
		}
		argv := []string{"resolve", "--platform=linux/amd64", "--base-import-paths", "--recursive"}
		for _, c := range strings.Split(configs, ",") {
			argv = append(argv, "-f", c)
		}
		start := time.Now()
		cmd := exec.Command(ko, argv...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(),
			"KO_DOCKER_REPO="+host+"/knative-"+nm,
			"KO_DEFAULTBASEIMAGE="+baseRef.String(),
			"GOFLAGS=-mod=mod",
			"CGO_ENABLED=0",
		)
		var yaml bytes.Buffer
		cmd.Stdout, cmd.Stderr = &yaml, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("ko resolve for %s: %w", nm, err)
		}
		log.Printf("knative-images: %s built in %s", nm, time.Since(start).Round(time.Second))
		resolved := yaml.String()
		for _, m := range digestRef(host).FindAllString(resolved, -1) {
			refs[m] = true
		}
		resolved = strings.ReplaceAll(resolved, host+"/", node.KnativePlaceholder+"/")
		if err := os.WriteFile(filepath.Join(tmp, nm+".yaml"), []byte(resolved), 0o644); err != nil {
			return err
		}
	}
	if len(refs) == 0 {
		return errors.New("ko resolved no image")
	}
	sorted := make([]string, 0, len(refs))
	for r := range refs {
		sorted = append(sorted, r)
	}
	sort.Strings(sorted)
	for _, r := range sorted {
		if err := keep(context.Background(), lp, host, r); err != nil {
			return err
		}
	}
	log.Printf("knative-images: %d images in %s", len(sorted), out)
	return os.Rename(tmp, out)
}

// digestRef matches an image reference by digest at host.
func digestRef(host string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(host) + `/[a-z0-9._/-]+@sha256:[0-9a-f]{64}`)
}

// keep copies the image (or index) ref into the layout, named by its repository at the
// placeholder host, which is how the cluster test finds where to push it.
func keep(ctx context.Context, lp layout.Path, host, ref string) error {
	d, err := name.NewDigest(ref, name.Insecure)
	if err != nil {
		return err
	}
	desc, err := remote.Get(d, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reading %s back: %w", ref, err)
	}
	repo := strings.TrimPrefix(d.Context().String(), host+"/")
	opt := layout.WithAnnotations(map[string]string{node.KnativeRepoAnnotation: repo})
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return err
		}
		return lp.AppendIndex(idx, opt)
	}
	img, err := desc.Image()
	if err != nil {
		return err
	}
	return lp.AppendImage(img, opt)
}
