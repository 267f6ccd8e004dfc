package webhook

// Azure Container Registry webhooks send one event per request, shaped like a distribution
// notification: action, target.repository/tag/digest and request.host (the registry's login
// server). The same object is the data of Event Grid's ImagePushed CloudEvent.

type acrEvent struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Target struct {
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
		Digest     string `json:"digest"`
	} `json:"target"`
	Request struct {
		Host string `json:"host"`
	} `json:"request"`
}

func parseACR(req Request) ([]Event, error) {
	return parseACREvent("acr", req.Body, "")
}

// parseACREvent parses an ACR event; deliveryID, when set, overrides the event's own id.
func parseACREvent(source string, body []byte, deliveryID string) ([]Event, error) {
	var p acrEvent
	if err := decodeJSON(body, &p); err != nil {
		return nil, err
	}
	if p.Action != "push" {
		return nil, ignored("action %s is not push", quote(p.Action))
	}
	if p.Target.Tag == "" {
		return nil, ignored("untagged push")
	}
	if p.Request.Host == "" {
		return nil, malformed("no request.host")
	}
	if deliveryID == "" {
		deliveryID = p.ID
	}
	if deliveryID == "" {
		deliveryID = bodyID(body)
	}
	e, err := newEvent(Event{Source: source, Host: p.Request.Host, Repository: p.Target.Repository, Tag: p.Target.Tag, Digest: p.Target.Digest, DeliveryID: deliveryID})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
