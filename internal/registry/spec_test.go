package registry_test

import (
	"context"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestPrepareRejectsWhatOnlyASpecChangeFixes(t *testing.T) {
	reg := testenv.NewRegistry(t)
	tests := []struct {
		name    string
		edit    func(*v1.ImageRepository)
		reason  string
		stalled bool
		says    string
	}{
		{"provider aws", func(o *v1.ImageRepository) { o.Spec.Provider = v1.AWSProvider },
			v1.UnsupportedProviderReason, true, `is not an ECR registry`},
		{"provider azure", func(o *v1.ImageRepository) { o.Spec.Provider = v1.AzureProvider },
			v1.UnsupportedProviderReason, true, `is not an Azure Container Registry`},
		{"provider gcp", func(o *v1.ImageRepository) { o.Spec.Provider = v1.GCPProvider },
			v1.UnsupportedProviderReason, true, `is not an Artifact Registry`},
		{"a tag in the image", func(o *v1.ImageRepository) { o.Spec.Image += ":v1" },
			v1.ImageURLInvalidReason, true, "should not contain a tag"},
		{"a digest in the image", func(o *v1.ImageRepository) { o.Spec.Image += "@sha256:" + sha },
			v1.ImageURLInvalidReason, true, "should not contain a digest"},
		{"a scheme in the image", func(o *v1.ImageRepository) { o.Spec.Image = "https://" + o.Spec.Image },
			v1.ImageURLInvalidReason, true, "should not start with URL scheme"},
		{"an invalid exclusion", func(o *v1.ImageRepository) { o.Spec.ExclusionList = []string{"ok", "(unclosed"} },
			v1.ReadOperationFailedReason, false, `spec.exclusionList[1] "(unclosed" is not a valid regular expression`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := imageRepository("default", reg.Image("app"), tt.edit)
			_, err := fast().Prepare(context.Background(), nil, obj)
			wantError(t, err, tt.reason, tt.says)
			if got := registry.Stalled(err); got != tt.stalled {
				t.Errorf("Stalled = %v, want %v", got, tt.stalled)
			}
		})
	}
	if n := reg.RequestCount(); n != 0 {
		t.Errorf("%d requests reached the registry, want none", n)
	}
}

const sha = "0000000000000000000000000000000000000000000000000000000000000000"
