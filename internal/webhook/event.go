package webhook

import (
	"regexp"
	"strings"

	"github.com/imagereflector/reflector/internal/imagename"
)

// Event is one push, normalised: the repository it happened in and what was pushed. Host and
// Repository are canonical as imagename.Key makes them (lower case, Docker Hub aliases folded
// into docker.io, library/ made explicit), so Key matches an ImageRepository's key directly. A
// payload is a trigger, never the truth: the tag and digest are hints for the scan to confirm
// with the registry.
type Event struct {
	// Host is the registry host, with its port if any, e.g. ghcr.io or registry.local:5000.
	Host string
	// Repository is the repository path inside the registry, e.g. org/app or library/alpine.
	Repository string
	// Tag is the pushed tag; empty only for sources that may announce a repository without one
	// (generic, cdevents).
	Tag string
	// Digest is the pushed manifest's digest when the source reports one. It is checked
	// against the OCI digest grammar only.
	Digest string
	// DeliveryID identifies the delivery so that the caller can drop repeats: the source's own
	// id when it sends one, otherwise a hash of the body (a retried delivery has the same body).
	// The events of one delivery may share it.
	DeliveryID string
	// Source names the provider or CloudEvent source the event came from, e.g. "harbor".
	Source string
}

// Key returns the match key of the event's repository, as imagename.Key computes it.
func (e Event) Key() string {
	return imagename.Key(e.Host, e.Repository)
}

// Patterns from the distribution reference grammar, on names already lower-cased. Go's regexp
// runs in linear time, so a hostile payload cannot make matching slow.
var (
	hostPattern   = regexp.MustCompile(`^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$`)
	pathPattern   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	digestPattern = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[A-Za-z0-9=_-]+$`)
)

// maxNameLength is the longest repository name, host included, that registries accept.
const maxNameLength = 255

// newEvent canonicalises and validates one event. An empty host means Docker Hub.
func newEvent(e Event) (Event, error) {
	var err error
	e.Host, e.Repository, err = canonicalRepository(e.Host, e.Repository)
	if err != nil {
		return Event{}, err
	}
	return pushEvent(e)
}

// canonicalRepository canonicalises and validates a registry host and a repository path.
func canonicalRepository(host, repository string) (string, string, error) {
	host = strings.TrimSpace(host)
	repository = strings.TrimSpace(repository)
	if repository == "" {
		return "", "", malformed("no repository")
	}
	// A slash would move part of the host into the repository path once joined.
	if strings.Contains(strings.TrimSuffix(host, "/"), "/") {
		return "", "", malformed("invalid registry host %s", quote(host))
	}
	key := imagename.Key(host, repository)
	if len(key) > maxNameLength {
		return "", "", malformed("repository name %s is longer than %d characters", quote(key), maxNameLength)
	}
	host, repository, _ = strings.Cut(key, "/")
	if !hostPattern.MatchString(host) {
		return "", "", malformed("invalid registry host %s", quote(host))
	}
	if !pathPattern.MatchString(repository) {
		return "", "", malformed("invalid repository %s", quote(repository))
	}
	return host, repository, nil
}

// pushEvent validates the tag and digest of e, a push to a repository canonicalRepository made.
func pushEvent(e Event) (Event, error) {
	if e.Tag != "" && !imagename.ValidTag(e.Tag) {
		return Event{}, malformed("invalid tag %s", quote(e.Tag))
	}
	if e.Digest != "" && !digestPattern.MatchString(e.Digest) {
		return Event{}, malformed("invalid digest %s", quote(e.Digest))
	}
	return e, nil
}

// isDigest tells a digest from a tag where a source puts either in the same field.
func isDigest(s string) bool {
	return strings.Contains(s, ":") && digestPattern.MatchString(s)
}
