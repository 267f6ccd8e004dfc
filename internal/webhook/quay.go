package webhook

import (
	"bytes"
	"encoding/json"
	"slices"
)

// Quay's "Push to Repository" notification gives docker_url (<host>/<namespace>/<name>, the
// host being quay.io or a self-hosted Quay) and updated_tags, a list of tag names; older Quay
// versions sent updated_tags as an object keyed by tag. One event per tag. Quay's other
// notifications (builds, vulnerabilities) have no updated_tags and are ignored.

type quayPayload struct {
	Repository  string          `json:"repository"`
	DockerURL   string          `json:"docker_url"`
	UpdatedTags json.RawMessage `json:"updated_tags"`
}

func parseQuay(req Request) ([]Event, error) {
	var p quayPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(p.UpdatedTags)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, ignored("not a repository push notification")
	}
	var tags []string
	if raw[0] == '{' {
		var byTag map[string]json.RawMessage
		if err := json.Unmarshal(raw, &byTag); err != nil {
			return nil, malformed("updated_tags is neither a list nor an object of tags")
		}
		for tag := range byTag {
			tags = append(tags, tag)
		}
		slices.Sort(tags)
	} else if err := json.Unmarshal(raw, &tags); err != nil {
		return nil, malformed("updated_tags is neither a list nor an object of tags")
	}
	var unique []string
	for _, t := range tags {
		unique = appendTag(unique, t)
	}
	if len(unique) == 0 {
		return nil, ignored("no updated tags")
	}

	ref := reference{host: "quay.io", repository: p.Repository}
	if p.DockerURL != "" {
		r, err := splitRef(p.DockerURL, true)
		if err != nil {
			return nil, err
		}
		ref = r
	}
	id := bodyID(req.Body)
	events := make([]Event, 0, len(unique))
	for _, tag := range unique {
		e, err := newEvent(Event{Source: "quay", Host: ref.host, Repository: ref.repository, Tag: tag, DeliveryID: id})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, nil
}
