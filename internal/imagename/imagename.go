// Package imagename turns image repository names into the forms reflector compares and reports:
// Flux's canonical name for status.canonicalImageName, and a match key under which an
// ImageRepository's spec.image and a registry event's repository compare equal.
package imagename

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// DockerHub is the registry host that every Docker Hub alias maps to in a match key.
const DockerHub = "docker.io"

// dockerHubAliases are the hosts under which Docker Hub is known.
var dockerHubAliases = map[string]bool{
	"docker.io":               true,
	"index.docker.io":         true,
	"registry-1.docker.io":    true,
	"registry.hub.docker.com": true,
}

// Parse validates an ImageRepository's spec.image and returns the repository it names. A URL
// scheme, a tag or a digest is an error, as in Flux; insecure allows a plain-HTTP registry.
func Parse(image string, insecure bool) (name.Repository, error) {
	if scheme, _, ok := strings.Cut(image, "://"); ok {
		return name.Repository{}, fmt.Errorf(".spec.image value should not start with URL scheme; remove '%s://'", scheme)
	}
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return name.Repository{}, fmt.Errorf(".spec.image value should not contain a digest; remove '@%s'", digest)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(image, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf(".spec.image value is not a valid image repository: %w", err)
	}
	path := strings.TrimPrefix(image, ref.Context().RegistryStr())
	if _, tag, ok := strings.Cut(path, ":"); ok {
		return name.Repository{}, fmt.Errorf(".spec.image value should not contain a tag; remove ':%s'", tag)
	}
	return ref.Context(), nil
}

// Canonical returns Flux's canonical name of spec.image, e.g. index.docker.io/library/alpine
// for alpine.
func Canonical(image string, insecure bool) (string, error) {
	repo, err := Parse(image, insecure)
	if err != nil {
		return "", err
	}
	return repo.Name(), nil
}

// Key returns the match key of a registry host and repository path: lower case, Docker Hub
// aliases folded into docker.io, and Docker Hub's implied library/ made explicit. Two names
// that denote the same repository have the same key.
func Key(host, repository string) string {
	host = strings.ToLower(strings.TrimSuffix(host, "/"))
	repository = strings.ToLower(strings.Trim(repository, "/"))
	if host == "" || dockerHubAliases[host] {
		host = DockerHub
		if !strings.Contains(repository, "/") {
			repository = "library/" + repository
		}
	}
	return host + "/" + repository
}

// KeyOf returns the match key of a full image name such as ghcr.io/org/app or alpine. A name
// with a tag or digest is reduced to its repository.
func KeyOf(image string) (string, error) {
	ref, err := name.ParseReference(strings.ToLower(image), name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("invalid image name %q: %w", image, err)
	}
	repo := ref.Context()
	return Key(repo.RegistryStr(), repo.RepositoryStr()), nil
}
