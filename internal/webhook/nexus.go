package webhook

// Nexus Repository sends "rm:repository:component" webhooks (X-Nexus-Webhook-ID) when a
// component is created, updated or deleted; for Docker repositories the component name is the
// image path and the version is the tag. The payload does not say under which host the Docker
// repository is served (a connector port, a subdomain or a path prefix), so the webhook URL
// must name it: ?host=<host[:port]>[/<path prefix>].

type nexusPayload struct {
	Action         string `json:"action"`
	RepositoryName string `json:"repositoryName"`
	Component      *struct {
		Format  string `json:"format"`
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"component"`
}

func parseNexus(req Request) ([]Event, error) {
	if id := req.Header.Get("X-Nexus-Webhook-ID"); id != "" && id != "rm:repository:component" {
		return nil, ignored("webhook %s is not rm:repository:component", quote(id))
	}
	host, prefix := hostParam(req.Query)
	if host == "" {
		return nil, malformed("Nexus does not send the registry host: add ?host=<registry host>[/<path prefix>] to the webhook URL")
	}
	var p nexusPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	c := p.Component
	if c == nil {
		return nil, ignored("not a component event")
	}
	if c.Format != "docker" {
		return nil, ignored("component format %s is not docker", quote(c.Format))
	}
	switch p.Action {
	case "CREATED", "UPDATED":
	default:
		return nil, ignored("component action %s is not a push", quote(p.Action))
	}
	if c.Version == "" {
		return nil, ignored("untagged component")
	}
	if c.Name == "" {
		return nil, malformed("component has no name")
	}
	id := req.Header.Get("X-Nexus-Webhook-Delivery")
	if id == "" {
		id = bodyID(req.Body)
	}
	e, err := newEvent(Event{Source: "nexus", Host: host, Repository: joinPath(prefix, c.Name), Tag: c.Version, DeliveryID: id})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
