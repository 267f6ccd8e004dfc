// Command release writes the manifests of a release and their checksums, for `make release`
// (docs/releasing.md):
//
//	go run ./hack/release -version v1.2.3 -images images.yaml -out dist
//
// images.yaml is what `make images` wrote: the ko:// references of knative/ mapped to the images
// ko pushed, by digest. It writes, into -out:
//
//   - install.yaml: knative/ built with kustomize, every image pinned by digest, every object
//     labelled with the version; no CRD, so that `kubectl delete -f install.yaml` keeps them;
//   - crds.yaml: config/crd built, the CRDs with the annotations that keep Flux and Helm from
//     applying over them or deleting them;
//   - checksums.txt: the SHA-256 of every other file in -out, as sha256sum prints them.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// semver is a release version as the tags name it: v, then a semantic version.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// digestRef is an image pinned by digest.
var digestRef = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)

func main() {
	version := flag.String("version", "", "the release's version, vMAJOR.MINOR.PATCH[-PRERELEASE]")
	images := flag.String("images", "", "the image mapping that `make images` wrote")
	out := flag.String("out", "dist", "where to write the manifests and checksums.txt")
	flag.Parse()
	if err := run(*version, *images, *out); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, images, out string) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", version)
	}
	if images == "" {
		return errors.New("-images names no file")
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	mapping, err := os.ReadFile(images)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}

	install, err := build(root, "knative", version, map[string][]byte{"images.yaml": mapping}, "transformers:\n  - images.yaml\n")
	if err != nil {
		return err
	}
	if err := checkInstall(install); err != nil {
		return fmt.Errorf("install.yaml: %w", err)
	}
	crds, err := build(root, "config/crd", version, nil, "")
	if err != nil {
		return err
	}
	if err := checkCRDs(crds); err != nil {
		return fmt.Errorf("crds.yaml: %w", err)
	}
	header := func(what string) []byte {
		return []byte("# reflector " + version + ": " + what + "\n")
	}
	if err := os.WriteFile(filepath.Join(out, "crds.yaml"), join(header("the CRDs of image.toolkit.fluxcd.io/v1; apply them first, with kubectl apply --server-side -f crds.yaml. Nothing else applies them over, prunes or deletes them (see their annotations)."), crds), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), join(header("everything but the CRDs, images pinned by digest; kubectl apply -f install.yaml installs or upgrades, kubectl delete -f install.yaml removes reflector and keeps the CRDs."), install), 0o644); err != nil {
		return err
	}
	return writeChecksums(out)
}

// moduleRoot is the repository's root: the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run it from the repository")
		}
		dir = parent
	}
}

// build runs kustomize on an overlay of dir (relative to root) that labels every object with
// the version and adds the given kustomization lines, with files beside the overlay.
func build(root, dir, version string, files map[string][]byte, extra string) ([]map[string]any, error) {
	tmp, err := os.MkdirTemp("", "reflector-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	base, err := filepath.Rel(tmp, filepath.Join(root, dir))
	if err != nil {
		return nil, err
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
labels:
  - pairs:
      app.kubernetes.io/version: %s
    includeSelectors: false
%s`, filepath.ToSlash(base), version, extra)
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	// The overlay lives in a temporary directory outside the repository.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), tmp)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []map[string]any
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		objs = append(objs, m)
	}
	return objs, nil
}

func kindName(o map[string]any) string {
	meta, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v", o["kind"], meta["name"])
}

// checkInstall refuses a bundle that holds a CRD or names an image by anything but a digest.
func checkInstall(objs []map[string]any) error {
	var errs []error
	images := 0
	for _, o := range objs {
		if o["kind"] == "CustomResourceDefinition" {
			errs = append(errs, fmt.Errorf("%s: the CRDs belong in crds.yaml alone", kindName(o)))
		}
		walkImages(o, func(image string) {
			images++
			if !digestRef.MatchString(image) {
				errs = append(errs, fmt.Errorf("%s runs %s, not an image pinned by digest", kindName(o), image))
			}
		})
	}
	if images == 0 {
		errs = append(errs, errors.New("no workload names an image"))
	}
	return errors.Join(errs...)
}

// walkImages calls f with the value of every "image" field of a container in v.
func walkImages(v any, f func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				f(s)
				continue
			}
			walkImages(x, f)
		}
	case []any:
		for _, x := range v {
			walkImages(x, f)
		}
	}
}

// checkCRDs refuses a CRD bundle that holds anything else.
func checkCRDs(objs []map[string]any) error {
	if len(objs) == 0 {
		return errors.New("config/crd built nothing")
	}
	for _, o := range objs {
		if o["kind"] != "CustomResourceDefinition" {
			return fmt.Errorf("%s is not a CRD", kindName(o))
		}
	}
	return nil
}

// join writes objects as one YAML stream after a comment.
func join(header []byte, objs []map[string]any) []byte {
	var b bytes.Buffer
	b.Write(header)
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			// The objects came from kustomize's own YAML.
			panic(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

// writeChecksums writes checksums.txt in dir: the SHA-256 of every other regular file there, by
// name (os.ReadDir sorts them), in the format `sha256sum -c checksums.txt` reads.
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "checksums.txt" || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		lines = append(lines, hex.EncodeToString(h.Sum(nil))+"  "+e.Name()+"\n")
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(strings.Join(lines, "")), 0o644)
}
