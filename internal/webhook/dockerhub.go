package webhook

// Docker Hub repository webhooks fire on every push and cannot sign or set headers, hence the
// ?token= query parameter. The payload names the repository (repository.repo_name, e.g.
// "org/app") and the tag (push_data.tag).

type dockerHubPayload struct {
	PushData *struct {
		Tag string `json:"tag"`
	} `json:"push_data"`
	Repository struct {
		RepoName string `json:"repo_name"`
	} `json:"repository"`
}

func parseDockerHub(req Request) ([]Event, error) {
	var p dockerHubPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	if p.PushData == nil {
		return nil, ignored("not a push notification")
	}
	if p.PushData.Tag == "" {
		return nil, ignored("untagged push")
	}
	if p.Repository.RepoName == "" {
		return nil, malformed("no repository.repo_name")
	}
	e, err := newEvent(Event{Source: "dockerhub", Host: "docker.io", Repository: p.Repository.RepoName, Tag: p.PushData.Tag, DeliveryID: bodyID(req.Body)})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
