package webhook

// The generic provider is for senders under the user's control, such as a CI job:
// {"image": "ghcr.io/org/app", "tag": "v1", "digest": "sha256:..."} signed with X-Signature.
// The image follows Docker's naming ("alpine" is docker.io/library/alpine) and may itself carry
// the tag or digest. Without a tag the event still asks for a scan of the repository.

type genericPayload struct {
	Image  string `json:"image"`
	Tag    string `json:"tag"`
	Digest string `json:"digest"`
}

func parseGeneric(req Request) ([]Event, error) {
	var p genericPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	if p.Image == "" {
		return nil, malformed("no image")
	}
	ref, err := splitRef(p.Image, false)
	if err != nil {
		return nil, err
	}
	tag, err := agree("tag", p.Tag, ref.tag)
	if err != nil {
		return nil, err
	}
	digest, err := agree("digest", p.Digest, ref.digest)
	if err != nil {
		return nil, err
	}
	e, err := newEvent(Event{Source: "generic", Host: ref.host, Repository: ref.repository, Tag: tag, Digest: digest, DeliveryID: bodyID(req.Body)})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// agree returns the value given by a field or by the image reference, whichever is set, and
// fails when both are set and differ.
func agree(what, field, fromImage string) (string, error) {
	switch {
	case field == "":
		return fromImage, nil
	case fromImage == "" || fromImage == field:
		return field, nil
	default:
		return "", malformed("%s %s differs from the image's %s", what, quote(field), quote(fromImage))
	}
}
