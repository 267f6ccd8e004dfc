// Package signing signs images in a test's registries as cosign and Notation sign them, and
// makes the trust those signatures are checked against: cosign key pairs, a private Sigstore
// deployment (Fulcio, Rekor, a CT log and a timestamping authority in memory), a Notation
// certificate authority and a TUF repository. It is apart from testenv so that a test binary
// which starts an apiserver or a registry does not link sigstore and notation unless it signs.
package signing

import (
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Manifest is an image manifest to sign: its digest in image (host/path), reached through
// Transport, or over plain HTTP when Transport is nil.
type Manifest struct {
	Image     string
	Digest    string
	Transport http.RoundTripper
}

// In is the manifest digest of repo in the test registry reg, reached in-process.
func In(reg *testenv.Registry, repo, digest string) Manifest {
	return Manifest{Image: reg.Host() + "/" + repo, Digest: digest, Transport: reg.Transport()}
}

// At is the manifest digest of image (host/path), in a registry reached over plain HTTP such
// as docker-registry, which has no referrers API.
func At(image, digest string) Manifest {
	return Manifest{Image: image, Digest: digest}
}

func (m Manifest) transport() http.RoundTripper {
	if m.Transport == nil {
		return remote.DefaultTransport
	}
	return m.Transport
}

// signTarget is an image to sign: the manifest digest in repo, reached with direct.
type signTarget struct {
	repo   name.Repository
	digest string
	direct remote.Option
}

func (m Manifest) target(t testing.TB) signTarget {
	t.Helper()
	repo, err := name.NewRepository(m.Image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return signTarget{repo, m.Digest, remote.WithTransport(m.transport())}
}
