package registry_test

import (
	"slices"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestIntegrationInsecurePlainHTTP(t *testing.T) {
	// Under a name that is not 127.0.0.1, go-containerregistry tries HTTPS only, unless the
	// ImageRepository is insecure.
	reg := testenv.NewRegistry(t, testenv.RegistryAlias("registry.test"))
	reg.Push(t, "app", "v1")
	c := fast(reaching(reg, "registry.test")...)
	image := reg.HostAs("registry.test") + "/app"

	_, err := scan(t, c, nil, imageRepository("default", image))
	wantError(t, err, v1.ReadOperationFailedReason, "HTTP response to HTTPS client")

	res, err := scan(t, c, nil, imageRepository("default", image, func(o *v1.ImageRepository) { o.Spec.Insecure = true }))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tags, []string{"v1"}) {
		t.Errorf("tags = %q, want [v1]", res.Tags)
	}
}
