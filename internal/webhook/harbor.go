package webhook

// Harbor's default webhook payload lists the pushed artifacts in event_data.resources, one per
// tag, each with a resource_url of <harbor host>/<project>/<repository>:<tag>. An artifact
// pushed by digest only has its digest in the tag field; it changes no tag and is left out.
// Harbor 1.x named the same payload "pushImage".

type harborPayload struct {
	Type      string `json:"type"`
	EventData struct {
		Resources []struct {
			Digest      string `json:"digest"`
			Tag         string `json:"tag"`
			ResourceURL string `json:"resource_url"`
		} `json:"resources"`
		Repository struct {
			RepoFullName string `json:"repo_full_name"`
		} `json:"repository"`
	} `json:"event_data"`
}

func parseHarbor(req Request) ([]Event, error) {
	var p harborPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "PUSH_ARTIFACT", "pushImage":
	default:
		return nil, ignored("event type %s is not a push", quote(p.Type))
	}
	id := bodyID(req.Body)
	var events []Event
	var skip skipped
	for _, r := range p.EventData.Resources {
		if r.Tag == "" || isDigest(r.Tag) {
			skip.add("untagged artifact")
			continue
		}
		ref, err := splitRef(r.ResourceURL, true)
		if err != nil {
			return nil, err
		}
		repository := p.EventData.Repository.RepoFullName
		if repository == "" {
			repository = ref.repository
		}
		e, err := newEvent(Event{Source: "harbor", Host: ref.host, Repository: repository, Tag: r.Tag, Digest: r.Digest, DeliveryID: id})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, skip.err(len(p.EventData.Resources), "resources")
	}
	return events, nil
}
