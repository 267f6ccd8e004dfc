package stack

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push writes a small random image to ref (host:port/repository:tag) over plain HTTP, the way
// a CI pipeline pushes a build, and returns its digest.
func Push(ref string) (string, error) {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}
