package webhook

import "strings"

// CNCF distribution (the Docker registry, GitLab's registry and others built on it) POSTs an
// envelope of events (Content-Type application/vnd.docker.distribution.events.v1+json) for
// every manifest and blob pushed or pulled. Only a manifest pushed under a tag changes a tag
// list; the layer and config blobs of the same push, platform manifests pushed by digest,
// pulls, mounts and deletes are left out.

type distributionEnvelope struct {
	Events *[]distributionEvent `json:"events"`
}

type distributionEvent struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Target struct {
		MediaType  string `json:"mediaType"`
		Digest     string `json:"digest"`
		Repository string `json:"repository"`
		URL        string `json:"url"`
		Tag        string `json:"tag"`
	} `json:"target"`
	Request struct {
		Host string `json:"host"`
	} `json:"request"`
}

// manifestMediaTypes are the media types of manifests and indexes; anything else pushed is a
// blob.
var manifestMediaTypes = map[string]bool{
	"application/vnd.docker.distribution.manifest.v1+json":      true,
	"application/vnd.docker.distribution.manifest.v1+prettyjws": true,
	"application/vnd.docker.distribution.manifest.v2+json":      true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
	"application/vnd.oci.image.manifest.v1+json":                true,
	"application/vnd.oci.image.index.v1+json":                   true,
	"application/vnd.oci.artifact.manifest.v1+json":             true,
}

func parseDistribution(req Request) ([]Event, error) {
	var p distributionEnvelope
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	if p.Events == nil {
		return nil, malformed("no events array")
	}
	var events []Event
	var skip skipped
	// Events without an id share one derived from the body, hashed once: hashing it per event
	// would make an envelope of many such events cost its length squared.
	var fromBody string
	// An envelope is usually about one repository: its name is canonicalised once.
	var last struct{ host, repository, canonHost, canonRepository string }
	for _, ev := range *p.Events {
		t := ev.Target
		switch {
		case ev.Action != "push":
			skip.add(quote(ev.Action) + " action")
			continue
		case !isManifest(t.MediaType, t.URL, t.Tag):
			skip.add("blob push")
			continue
		case t.Tag == "":
			skip.add("untagged manifest push")
			continue
		}
		host := ev.Request.Host
		if host == "" {
			host = urlHost(t.URL)
		}
		if host == "" {
			return nil, malformed("event %s has neither request.host nor target.url", quote(ev.ID))
		}
		id := ev.ID
		if id == "" {
			if fromBody == "" {
				fromBody = bodyID(req.Body)
			}
			id = fromBody
		}
		if host != last.host || t.Repository != last.repository || last.canonHost == "" {
			h, r, err := canonicalRepository(host, t.Repository)
			if err != nil {
				return nil, err
			}
			last.host, last.repository, last.canonHost, last.canonRepository = host, t.Repository, h, r
		}
		e, err := pushEvent(Event{Source: "distribution", Host: last.canonHost, Repository: last.canonRepository, Tag: t.Tag, Digest: t.Digest, DeliveryID: id})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, skip.err(len(*p.Events), "events")
	}
	return events, nil
}

// isManifest tells a manifest push from a blob push: by media type, else by the URL the
// registry reports, else by the presence of a tag (only manifests have one).
func isManifest(mediaType, url, tag string) bool {
	switch {
	case manifestMediaTypes[mediaType]:
		return true
	case strings.Contains(url, "/manifests/"):
		return true
	case strings.Contains(url, "/blobs/"):
		return false
	default:
		return mediaType == "" && tag != ""
	}
}
