package registry_test

import (
	"errors"
	"slices"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestIntegrationListTagsFollowsEveryPage(t *testing.T) {
	reg := testenv.NewRegistry(t)
	tags := testenv.RegistryTags("build", 25_000)
	reg.Push(t, "app", tags...)

	res, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tags, tags) {
		t.Fatalf("got %d tags (%q ... %q), want the 25000 pushed", len(res.Tags), res.Tags[0], res.Tags[len(res.Tags)-1])
	}
	if res.Pages != 25 || res.PageSize != registry.DefaultPageSize {
		t.Errorf("read %d pages of %d, want 25 of %d", res.Pages, res.PageSize, registry.DefaultPageSize)
	}
	if got, want := reg.RequestCount(), res.Pages+1; got != want {
		t.Errorf("%d requests reached the registry, want %d: one ping and one per page", got, want)
	}
}

func TestIntegrationListTagsFallsBackToSmallerPages(t *testing.T) {
	reg := testenv.NewRegistry(t, testenv.RegistryMaxPageSize(100))
	tags := testenv.RegistryTags("v", 1_050)
	reg.Push(t, "app", tags...)

	res, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tags, tags) {
		t.Fatalf("got %d tags, want the 1050 pushed", len(res.Tags))
	}
	if res.PageSize != 100 || res.Pages != 11 {
		t.Errorf("read %d pages of %d, want 11 of 100", res.Pages, res.PageSize)
	}
	var refused int
	for _, r := range reg.Requests() {
		if r.Status == 400 {
			refused++
		}
	}
	if refused != 1 || reg.RequestCount() != 13 {
		t.Errorf("%d requests, %d refused; want 13: a ping, the refused n=1000, 11 pages of 100", reg.RequestCount(), refused)
	}
}

func TestIntegrationListTagsExclusionList(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1.0.0", "v1.1.0", "sha256-abc.sig", "latest", "sha256-abc.att")

	tests := []struct {
		name      string
		exclusion []string
		want      []string
	}{
		{"the default drops cosign signatures", nil, []string{"latest", "sha256-abc.att", "v1.0.0", "v1.1.0"}},
		{"a list of its own replaces the default", []string{`^latest$`, `\.att$`}, []string{"sha256-abc.sig", "v1.0.0", "v1.1.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := imageRepository("default", reg.Image("app"), func(o *v1.ImageRepository) { o.Spec.ExclusionList = tt.exclusion })
			res, err := scan(t, fast(), nil, obj)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tags, tt.want) {
				t.Errorf("tags = %q, want %q", res.Tags, tt.want)
			}
		})
	}
}

func TestIntegrationListTagsLimit(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", testenv.RegistryTags("v", 120)...)

	_, err := scan(t, fast(registry.WithPageSize(100), registry.WithMaxTags(50)), nil, imageRepository("default", reg.Image("app")))
	wantError(t, err, v1.ReadOperationFailedReason, "more than 50 tags")
	if !errors.Is(err, registry.ErrTagLimit) {
		t.Errorf("error %v does not wrap ErrTagLimit", err)
	}
	if n := countPaths(reg, "/tags/list"); n != 1 {
		t.Errorf("%d pages requested, want 1: the listing stops once over the limit", n)
	}
}

func TestIntegrationListTagsErrors(t *testing.T) {
	tests := []struct {
		name   string
		fault  *testenv.RegistryFault
		image  string
		reason string
		says   []string
	}{
		{"401 from the registry", ptr(testenv.RegistryUnauthorized().On("/tags/list")), "app",
			v1.AuthenticationFailedReason, []string{"UNAUTHORIZED", "authentication required"}},
		{"404 injected", ptr(testenv.RegistryNotFound().On("/tags/list")), "app",
			v1.ReadOperationFailedReason, []string{"NAME_UNKNOWN", "repository name not known to registry"}},
		{"a repository that does not exist", nil, "nothing-here",
			v1.ReadOperationFailedReason, []string{"NAME_UNKNOWN", "nothing-here"}},
		{"malformed JSON", ptr(testenv.RegistryMalformedJSON().On("/tags/list")), "app",
			v1.ReadOperationFailedReason, []string{"not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := testenv.NewRegistry(t)
			reg.Push(t, "app", "v1")
			if tt.fault != nil {
				reg.Inject(*tt.fault)
			}
			_, err := scan(t, fast(), nil, imageRepository("default", reg.Image(tt.image)))
			wantError(t, err, tt.reason, append(tt.says, "listing tags of "+reg.Image(tt.image))...)
			if n := countPaths(reg, "/tags/list"); n != 1 {
				t.Errorf("%d tag list requests, want 1: this failure is not retried", n)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
