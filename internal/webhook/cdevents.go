package webhook

import (
	"net/url"
	"strings"
)

// A CDEvents artifact.published event names the artifact in subject.id as a package URL. For
// OCI artifacts that is pkg:oci/<name>@<digest>?repository_url=<host>/<path>&tag=<tag>, the
// digest percent-encoded (sha256%3A...). The repository comes from repository_url, which the
// purl spec leaves optional: without it the registry is unknown and the event is ignored.
// Publishing is a deliberate act of a pipeline, so an event without a tag still asks for a
// scan of the repository.

type cdEvent struct {
	Context struct {
		ID string `json:"id"`
	} `json:"context"`
	Subject struct {
		ID string `json:"id"`
	} `json:"subject"`
}

func parseCDEvent(data []byte, ceID string) ([]Event, error) {
	var ev cdEvent
	if err := decodeJSON(data, &ev); err != nil {
		return nil, err
	}
	if ev.Subject.ID == "" {
		return nil, malformed("no subject.id")
	}
	p, err := parsePURL(ev.Subject.ID)
	if err != nil {
		return nil, err
	}
	if p.typ != "oci" {
		return nil, ignored("artifact %s is not an OCI artifact", quote(p.typ))
	}
	repoURL := p.qualifiers["repository_url"]
	if repoURL == "" {
		return nil, ignored("purl has no repository_url qualifier naming the registry")
	}
	ref, err := splitRef(repoURL, true)
	if err != nil {
		return nil, err
	}
	digest := ""
	if isDigest(p.version) {
		digest = p.version
	}
	id := ceID
	if id == "" {
		id = ev.Context.ID
	}
	if id == "" {
		id = bodyID(data)
	}
	e, err := newEvent(Event{Source: "cdevents", Host: ref.host, Repository: ref.repository, Tag: p.qualifiers["tag"], Digest: digest, DeliveryID: id})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// purl is the part of a package URL this package reads.
type purl struct {
	typ, version string
	qualifiers   map[string]string
}

// parsePURL parses pkg:<type>/<namespace>/<name>@<version>?<qualifiers>#<subpath> as the purl
// spec describes it. Namespace, name and subpath are not needed: for OCI the repository_url
// qualifier names the repository in full.
func parsePURL(s string) (purl, error) {
	var p purl
	scheme, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || !strings.EqualFold(scheme, "pkg") {
		return p, malformed("subject.id %s is not a package URL", quote(s))
	}
	rest, _, _ = strings.Cut(rest, "#")
	rest, query, _ := strings.Cut(rest, "?")
	rest = strings.TrimLeft(rest, "/")
	typ, path, ok := strings.Cut(rest, "/")
	if !ok || typ == "" || path == "" {
		return p, malformed("package URL %s has no type or name", quote(s))
	}
	p.typ = strings.ToLower(typ)
	if i := strings.LastIndexByte(path, '@'); i >= 0 {
		path, p.version = path[:i], path[i+1:]
	}
	var err error
	if p.version, err = url.PathUnescape(p.version); err != nil {
		return p, malformed("package URL %s has a badly escaped version", quote(s))
	}
	p.qualifiers = map[string]string{}
	for _, kv := range strings.Split(query, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		// Qualifier values are percent-encoded; '+' is a literal plus, unlike in forms.
		if v, err = url.PathUnescape(v); err != nil {
			return p, malformed("package URL %s has a badly escaped qualifier %s", quote(s), quote(k))
		}
		p.qualifiers[strings.ToLower(k)] = v
	}
	return p, nil
}
