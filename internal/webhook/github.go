package webhook

import (
	"encoding/json"
	"strings"
)

// GitHub delivers GHCR pushes as "package" events (repository, organisation or app webhooks)
// and as the older "registry_package" events; both carry the same package object.
// The image comes from package_version.package_url (ghcr.io/<owner>/<name>:<tag>), the pull
// reference GitHub itself shows: in GitHub's documented example package.namespace is the
// source repository, not the image path. Without package_url the image is
// ghcr.io/<owner login>/<package name>.

type githubPayload struct {
	Action          string         `json:"action"`
	Package         *githubPackage `json:"package"`
	RegistryPackage *githubPackage `json:"registry_package"`
}

type githubPackage struct {
	Name        string `json:"name"`
	Namespace   string `json:"namespace"`
	Ecosystem   string `json:"ecosystem"`
	PackageType string `json:"package_type"`
	Owner       struct {
		Login string `json:"login"`
	} `json:"owner"`
	PackageVersion *struct {
		Version           string `json:"version"`
		PackageURL        string `json:"package_url"`
		ContainerMetadata struct {
			Tag struct {
				Name   string `json:"name"`
				Digest string `json:"digest"`
			} `json:"tag"`
		} `json:"container_metadata"`
		// Metadata is [] in webhook examples and {"container": {"tags": [...]}} in the REST
		// API's package versions; only the latter form carries tags.
		Metadata json.RawMessage `json:"metadata"`
	} `json:"package_version"`
}

func parseGitHub(req Request) ([]Event, error) {
	kind := req.Header.Get("X-GitHub-Event")
	switch kind {
	case "ping":
		return nil, ignored("ping event")
	case "", "package", "registry_package":
	default:
		return nil, ignored("event %s is not a package event", quote(kind))
	}
	var p githubPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	pkg := p.Package
	if pkg == nil || (kind == "registry_package" && p.RegistryPackage != nil) {
		pkg = p.RegistryPackage
	}
	if pkg == nil {
		return nil, malformed("no package object")
	}
	switch p.Action {
	case "published", "updated":
	default:
		return nil, ignored("package action %s is not a publication", quote(p.Action))
	}
	if !isContainerPackage(pkg.PackageType) && !isContainerPackage(pkg.Ecosystem) {
		return nil, ignored("package type %s is not a container", quote(pkg.PackageType))
	}
	v := pkg.PackageVersion
	if v == nil {
		return nil, malformed("no package_version")
	}

	var ref reference
	if v.PackageURL != "" {
		r, err := splitRef(v.PackageURL, true)
		if err != nil {
			return nil, err
		}
		ref = r
	} else {
		owner := pkg.Owner.Login
		if owner == "" {
			owner = pkg.Namespace
		}
		ref = reference{host: "ghcr.io", repository: joinPath(owner, pkg.Name)}
	}

	tags := appendTag(nil, v.ContainerMetadata.Tag.Name)
	tags = appendTag(tags, ref.tag)
	var restMetadata struct {
		Container struct {
			Tags []string `json:"tags"`
		} `json:"container"`
	}
	// The array form fails to decode into the object and simply carries no tags.
	if json.Unmarshal(v.Metadata, &restMetadata) == nil {
		for _, t := range restMetadata.Container.Tags {
			tags = appendTag(tags, t)
		}
	}
	if len(tags) == 0 {
		return nil, ignored("untagged package version")
	}

	digest := v.ContainerMetadata.Tag.Digest
	if digest == "" {
		digest = ref.digest
	}
	if digest == "" && isDigest(v.Version) {
		digest = v.Version
	}
	id := req.Header.Get("X-GitHub-Delivery")
	if id == "" {
		id = bodyID(req.Body)
	}
	events := make([]Event, 0, len(tags))
	for _, tag := range tags {
		e, err := newEvent(Event{Source: "github", Host: ref.host, Repository: ref.repository, Tag: tag, Digest: digest, DeliveryID: id})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, nil
}

func isContainerPackage(t string) bool {
	return strings.EqualFold(t, "container") || strings.EqualFold(t, "docker")
}

// appendTag appends a non-empty tag that is not there yet.
func appendTag(tags []string, tag string) []string {
	tag = strings.TrimSpace(tag)
	if tag == "" {
		return tags
	}
	for _, t := range tags {
		if t == tag {
			return tags
		}
	}
	return append(tags, tag)
}
