package signature_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/testenv"
)

// cliRun is one case's image in the registry under test, signed by the real cosign CLI.
type cliRun struct {
	cli                  *testenv.CosignCLI
	format               testenv.CosignCLIFormat
	image                string
	digest, otherDigest  string
	trusted, otherSigner *testenv.CosignCLIKey
}

func (r cliRun) sign(t *testing.T, key *testenv.CosignCLIKey, digest string) {
	t.Helper()
	r.cli.Sign(t, key, r.image, digest, r.format)
}

// cliCase signs a case's image and says the verdict for it.
type cliCase struct {
	name string
	sign func(t *testing.T, r cliRun)
	ok   bool
	// reason, per format, is what the refusal says.
	reason map[testenv.CosignCLIFormat]string
	// otherSigned says that the case signed the other image with the trusted key.
	otherSigned bool
}

func both(reason string) map[testenv.CosignCLIFormat]string {
	return map[testenv.CosignCLIFormat]string{testenv.CosignBundle: reason, testenv.CosignLegacySig: reason}
}

var cliCases = []cliCase{
	{name: "the trusted key pair", sign: func(t *testing.T, r cliRun) {
		r.sign(t, r.trusted, r.digest)
		checkCosignWrote(t, r)
	}, ok: true},
	{name: "unsigned", sign: func(*testing.T, cliRun) {}, reason: both("not signed")},
	{name: "another key pair", sign: func(t *testing.T, r cliRun) { r.sign(t, r.otherSigner, r.digest) },
		reason: map[testenv.CosignCLIFormat]string{
			testenv.CosignBundle:    "signed, but no signature bundle verifies with the trusted keys",
			testenv.CosignLegacySig: "signed, but no signature verifies with the trusted keys"}},
	{name: "another key pair, then the trusted one", sign: func(t *testing.T, r cliRun) {
		r.sign(t, r.otherSigner, r.digest)
		r.sign(t, r.trusted, r.digest)
	}, ok: true},
	{name: "another image signed", sign: func(t *testing.T, r cliRun) { r.sign(t, r.trusted, r.otherDigest) },
		reason: both("not signed"), otherSigned: true},
	{name: "another image's signature copied to it", sign: func(t *testing.T, r cliRun) {
		r.sign(t, r.trusted, r.otherDigest)
		testenv.CosignReplay(t, r.image, r.otherDigest, r.digest, r.format)
	}, reason: map[testenv.CosignCLIFormat]string{
		testenv.CosignBundle:    "the signature bundle is over another digest",
		testenv.CosignLegacySig: "the signature is over another digest, sha256:"}, otherSigned: true},
}

// checkCosignWrote checks that cosign stored the signature of r.digest where its format says,
// so that a change of cosign's defaults does not pass for the format it replaced.
func checkCosignWrote(t *testing.T, r cliRun) {
	t.Helper()
	repo, err := name.NewRepository(r.image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tags, err := remote.List(repo)
	if err != nil {
		t.Fatal(err)
	}
	sigTag := strings.Replace(r.digest, ":", "-", 1) + ".sig"
	if got := slices.Contains(tags, sigTag); got != (r.format == testenv.CosignLegacySig) {
		t.Errorf("tags %v: a %s tag is %v for the %s format", tags, sigTag, got, r.format)
	}
	if r.format != testenv.CosignBundle {
		return
	}
	idx, err := remote.Referrers(repo.Digest(r.digest))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d referrers of the signed image, want cosign's one bundle: %+v", len(im.Manifests), im.Manifests)
	}
}

// cliRegistry is a registry the CLI signs in: it pushes a new image to repo:tag and returns its
// digest, and names repo's image.
type cliRegistry struct {
	name  string
	start func(t *testing.T) (push func(t *testing.T, repo, tag string) string, image func(repo string) string)
}

var cliRegistries = []cliRegistry{
	{"in-process registry, referrers API", func(t *testing.T) (func(*testing.T, string, string) string, func(string) string) {
		reg := testenv.NewRegistry(t, testenv.RegistryReferrers())
		return func(t *testing.T, repo, tag string) string { return reg.Push(t, repo, tag) }, reg.Image
	}},
	{"in-process registry, referrers tag schema", func(t *testing.T) (func(*testing.T, string, string) string, func(string) string) {
		reg := testenv.NewRegistry(t)
		return func(t *testing.T, repo, tag string) string { return reg.Push(t, repo, tag) }, reg.Image
	}},
	{"docker-registry", func(t *testing.T) (func(*testing.T, string, string) string, func(string) string) {
		host := testenv.NewDockerRegistry(t)
		return func(t *testing.T, repo, tag string) string { return pushRandom(t, host+"/"+repo+":"+tag) },
			func(repo string) string { return host + "/" + repo }
	}},
}

// TestIntegrationVerifyCosignCLI signs images with the real cosign CLI, with key pairs that
// `cosign generate-key-pair` made, in both forms cosign v3 writes (its default Sigstore bundle
// referrer and the legacy .sig tag), on go-containerregistry's registry with and without the
// referrers API and on Debian's docker-registry, and checks each verdict of Verify with the
// trusted cosign.pub.
func TestIntegrationVerifyCosignCLI(t *testing.T) {
	cli := testenv.NewCosignCLI(t)
	trusted, other := cli.GenerateKeyPair(t), cli.GenerateKeyPair(t)
	v, err := signature.New(cosignSpec(), map[string][]byte{"cosign.pub": trusted.PublicPEM})
	if err != nil {
		t.Fatalf("New() with the CLI's cosign.pub: %v", err)
	}
	for _, reg := range cliRegistries {
		t.Run(reg.name, func(t *testing.T) {
			push, image := reg.start(t)
			for _, format := range []testenv.CosignCLIFormat{testenv.CosignBundle, testenv.CosignLegacySig} {
				t.Run(format.String(), func(t *testing.T) {
					for i, tt := range cliCases {
						t.Run(tt.name, func(t *testing.T) {
							repoName := "f" + string(rune('0'+format)) + "c" + string(rune('a'+i)) + "/app"
							r := cliRun{cli: cli, format: format, image: image(repoName), trusted: trusted, otherSigner: other,
								digest: push(t, repoName, "1.0.0"), otherDigest: push(t, repoName, "0.9.0")}
							tt.sign(t, r)
							repo, err := name.NewRepository(r.image, name.Insecure)
							if err != nil {
								t.Fatal(err)
							}
							ok, reason, err := v.Verify(context.Background(), repo, r.digest)
							if err != nil {
								t.Fatalf("Verify() error = %v", err)
							}
							if want := tt.reason[format]; ok != tt.ok || !strings.Contains(reason, want) {
								t.Fatalf("Verify() = %v, %q; want %v, %q", ok, reason, tt.ok, want)
							}
							if ok, reason, err := v.Verify(context.Background(), repo, r.otherDigest); ok != tt.otherSigned || err != nil {
								t.Errorf("Verify(the other image) = %v, %q, %v; want %v", ok, reason, err, tt.otherSigned)
							}
						})
					}
				})
			}
		})
	}
}
