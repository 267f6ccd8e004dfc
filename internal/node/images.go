package node

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user of the base image, as in distroless's static image: the manifests of
// knative/ require a non-root user.
const NonRoot = 65532

// File is one file of an image layer.
type File struct {
	Path string
	Mode int64 // with the type bits of tar: 0o755 a file, a directory when Dir is set
	Dir  bool
	Data []byte
	// Owner is the file's user and group id (0: root).
	Owner int
}

// Layer returns an uncompressed layer of files, in path order, with a fixed
// time, so that the same files give the same digest.
func Layer(files []File) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: path.Clean(f.Path), Mode: f.Mode, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Size: int64(len(f.Data)), Uid: f.Owner, Gid: f.Owner}
		if f.Dir {
			h.Typeflag, h.Size, h.Name = tar.TypeDir, 0, h.Name+"/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// Image returns base (nil: the empty image) with files as a new layer, for linux/amd64, with
// cfg changed by edit.
func Image(base v1.Image, files []File, edit func(*v1.Config)) (v1.Image, error) {
	if base == nil {
		base = mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	}
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if edit != nil {
		edit(&cf.Config)
	}
	return mutate.ConfigFile(img, cf)
}

// ProgramImage returns an image of the static program at bin as /<name>, its entrypoint, on
// base (nil: empty).
func ProgramImage(base v1.Image, bin, name string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return Image(base, []File{{Path: name, Mode: 0o755, Data: data}}, func(c *v1.Config) {
		c.Entrypoint = []string{"/" + name}
	})
}

// LinkedProgramImage returns an image of the dynamically linked program at bin as /<name>,
// its entrypoint, on base, with the host's ELF interpreter and the shared libraries the program
// names (from the host's multiarch library directory), at the paths where the interpreter
// looks: what a glibc base image such as distroless's base carries. Traefik's build links the
// C library.
func LinkedProgramImage(base v1.Image, bin, name string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil, fmt.Errorf("%s is statically linked: use ProgramImage", bin)
	}
	paths := []string{interp}
	for _, l := range libs {
		paths = append(paths, filepath.Join(multiarchLib, l))
	}
	files := []File{{Path: name, Mode: 0o755, Data: data}}
	dirs := map[string]bool{}
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("%s needs %s: %w", bin, p, err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(p, "/")
		files = append(files, File{Path: rel, Mode: 0o755, Data: b})
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			files = append(files, File{Path: d, Mode: 0o755, Dir: true})
		}
	}
	return Image(base, files, func(c *v1.Config) {
		c.Entrypoint = []string{"/" + name}
	})
}

// multiarchLib is where Debian keeps the C library of amd64, a directory the ELF interpreter
// searches by default.
const multiarchLib = "/lib/x86_64-linux-gnu"

// BaseImage returns an image for static programs like distroless's static one: /etc/passwd and
// /etc/group with root and nonroot, the CA certificates of the host's
// /etc/ssl/certs/ca-certificates.crt, /tmp, nonroot's home (its own: client-go's programs look
// for ~/.kube/config there, and a home they may not search is an error, not an absence), and
// nonroot as the user.
func BaseImage() (v1.Image, error) {
	certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		return nil, fmt.Errorf("the base image's CA certificates: %w", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	files := []File{
		{Path: "etc", Mode: 0o755, Dir: true},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "etc/ssl/certs", Mode: 0o755, Dir: true},
		{Path: "etc/ssl", Mode: 0o755, Dir: true},
		{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: certs},
		{Path: "home", Mode: 0o755, Dir: true},
		{Path: "home/nonroot", Mode: 0o700, Dir: true, Owner: NonRoot},
		{Path: "tmp", Mode: 0o1777, Dir: true},
	}
	return Image(nil, files, func(c *v1.Config) {
		c.User = fmt.Sprint(NonRoot)
		c.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	})
}

// Registry is the node's image registry: go-containerregistry's, in this process, served on
// 127.0.0.1 of the host (Host, for this process and the programs it runs there) and at the
// node's address inside its network namespace (NodeHost, what containerd and the pods pull
// from). Both serve the same repositories.
type Registry struct {
	// Host and NodeHost are host:port.
	Host, NodeHost string
	servers        []*http.Server
}

// startRegistry serves a registry on local (a listener of the host's 127.0.0.1) and inner (one
// in the node's network namespace).
func startRegistry(local, inner net.Listener) *Registry {
	h := registry.New(registry.Logger(discard))
	r := &Registry{Host: local.Addr().String(), NodeHost: inner.Addr().String()}
	for _, l := range []net.Listener{local, inner} {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		r.servers = append(r.servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	return r
}

// discard is the registry's logger: it logs every request.
var discard = log.New(io.Discard, "", 0)

// Push writes img to the registry as repo:tag and returns its reference at NodeHost.
func (r *Registry) Push(img v1.Image, repo, tag string) (string, error) {
	ref, err := name.NewTag(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return r.NodeHost + "/" + repo + ":" + tag, nil
}

func (r *Registry) close() {
	for _, s := range r.servers {
		s.Close()
	}
}
