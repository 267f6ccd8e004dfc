package node

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func TestBaseImage(t *testing.T) {
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		t.Skip("no CA certificates on this host to put in the base image")
	}
	img, err := BaseImage()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.User != "65532" {
		t.Errorf("platform %s/%s, user %q; want linux/amd64 and 65532", cf.OS, cf.Architecture, cf.Config.User)
	}
	files := map[string]string{}
	for _, e := range entries(t, img) {
		h := e.header
		files[h.Name] = e.data
		owner := 0
		if strings.TrimSuffix(h.Name, "/") == "home/nonroot" {
			owner = NonRoot
		}
		if h.Uid != owner || h.Gid != owner {
			t.Errorf("%s is owned by %d:%d, want %d", h.Name, h.Uid, h.Gid, owner)
		}
		if h.Name == "tmp/" && h.Mode&0o1777 != 0o1777 {
			t.Errorf("tmp has mode %o, want 1777", h.Mode)
		}
	}
	if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no nonroot user:\n%s", files["etc/passwd"])
	}
	if files["etc/ssl/certs/ca-certificates.crt"] == "" {
		t.Error("the base image has no CA certificates")
	}
}

func TestProgramImageIsReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, []byte("\x7fELF program"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := ProgramImage(nil, bin, "prog")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ProgramImage(nil, bin, "prog")
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("the same program gave two digests: %s and %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/prog" {
		t.Errorf("entrypoint %v, want [/prog]", cf.Config.Entrypoint)
	}
	if _, err := ProgramImage(nil, filepath.Join(t.TempDir(), "missing"), "x"); err == nil {
		t.Error("an image of a missing program: want an error")
	}
}

func TestLinkedProgramImage(t *testing.T) {
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no /bin/true on this host")
	}
	img, err := LinkedProgramImage(nil, bin, "true")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries(t, img) {
		have[e.header.Name] = true
	}
	for _, want := range []string{"true", "lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6"} {
		if !have[want] {
			t.Errorf("the image has no %s: %v", want, have)
		}
	}
	if _, err := LinkedProgramImage(nil, filepath.Join(t.TempDir(), "missing"), "x"); err == nil {
		t.Error("a missing program made an image")
	}
}

// entry is a file of an image's flattened file system.
type entry struct {
	header *tar.Header
	data   string
}

// entries returns the files of img's flattened file system, in order.
func entries(t *testing.T, img v1.Image) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{h, string(b)})
	}
}
