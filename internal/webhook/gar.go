package webhook

// Artifact Registry and Container Registry publish to the Pub/Sub topic "gcr"; a push
// subscription delivers each message wrapped in an envelope, {"message": {"data": <base64>,
// "messageId": ...}, "subscription": ...}. Push subscriptions cannot sign, hence ?token=. The
// decoded data is {"action": "INSERT"|"DELETE", "digest": "<host>/<path>@sha256:...", "tag":
// "<host>/<path>:<tag>"}; an INSERT without a tag is a push by digest.

type pubsubEnvelope struct {
	Message *struct {
		Data       string `json:"data"`
		MessageID  string `json:"messageId"`
		MessageID2 string `json:"message_id"`
	} `json:"message"`
}

type gcrNotification struct {
	Action string `json:"action"`
	Digest string `json:"digest"`
	Tag    string `json:"tag"`
}

func parseGAR(req Request) ([]Event, error) {
	return parsePubSub("gar", req.Body, "")
}

// parsePubSub parses a Pub/Sub envelope carrying a registry notification. fallbackID is used
// when the message has no id.
func parsePubSub(source string, body []byte, fallbackID string) ([]Event, error) {
	var env pubsubEnvelope
	if err := decodeJSON(body, &env); err != nil {
		return nil, err
	}
	if env.Message == nil {
		return nil, malformed("no message")
	}
	data, err := decodeBase64(env.Message.Data)
	if err != nil {
		return nil, malformed("%v", err)
	}
	var n gcrNotification
	if problem := jsonProblem(data, &n); problem != "" {
		return nil, malformed("message data: %s", problem)
	}
	if n.Action != "INSERT" {
		return nil, ignored("action %s is not INSERT", quote(n.Action))
	}
	if n.Tag == "" {
		return nil, ignored("untagged push")
	}
	tagged, err := splitRef(n.Tag, true)
	if err != nil {
		return nil, err
	}
	if tagged.tag == "" {
		return nil, malformed("tag %s has no tag part", quote(n.Tag))
	}
	digest := ""
	if n.Digest != "" {
		d, err := splitRef(n.Digest, true)
		if err != nil {
			return nil, err
		}
		if d.host != tagged.host || d.repository != tagged.repository {
			return nil, malformed("digest %s and tag %s name different repositories", quote(n.Digest), quote(n.Tag))
		}
		digest = d.digest
	}
	id := env.Message.MessageID
	if id == "" {
		id = env.Message.MessageID2
	}
	if id == "" {
		id = fallbackID
	}
	if id == "" {
		id = bodyID(body)
	}
	e, err := newEvent(Event{Source: source, Host: tagged.host, Repository: tagged.repository, Tag: tagged.tag, Digest: digest, DeliveryID: id})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
