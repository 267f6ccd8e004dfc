package webhook

import (
	"regexp"
	"strings"
)

// Amazon ECR reports pushes to EventBridge as "ECR Image Action" events; an EventBridge API
// destination forwards them with the Authorization header configured on its connection (API
// key auth). The registry host is derived from the event's account and region.

type ecrPayload struct {
	ID         string `json:"id"`
	DetailType string `json:"detail-type"`
	Account    string `json:"account"`
	Region     string `json:"region"`
	Detail     struct {
		Result         string `json:"result"`
		ActionType     string `json:"action-type"`
		RepositoryName string `json:"repository-name"`
		ImageDigest    string `json:"image-digest"`
		ImageTag       string `json:"image-tag"`
	} `json:"detail"`
}

var (
	ecrAccount = regexp.MustCompile(`^[0-9]{12}$`)
	ecrRegion  = regexp.MustCompile(`^[a-z]{2}(?:-[a-z]+)+-[0-9]+$`)
)

func parseECR(req Request) ([]Event, error) {
	var p ecrPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	if p.DetailType != "ECR Image Action" {
		return nil, ignored("detail-type %s is not ECR Image Action", quote(p.DetailType))
	}
	d := p.Detail
	if d.ActionType != "PUSH" {
		return nil, ignored("action-type %s is not PUSH", quote(d.ActionType))
	}
	if d.Result != "SUCCESS" {
		return nil, ignored("push result %s is not SUCCESS", quote(d.Result))
	}
	if d.ImageTag == "" {
		return nil, ignored("untagged push")
	}
	if !ecrAccount.MatchString(p.Account) {
		return nil, malformed("account %s is not a 12-digit AWS account id", quote(p.Account))
	}
	if !ecrRegion.MatchString(p.Region) {
		return nil, malformed("invalid region %s", quote(p.Region))
	}
	host := p.Account + ".dkr.ecr." + p.Region + ".amazonaws.com"
	if strings.HasPrefix(p.Region, "cn-") {
		host += ".cn"
	}
	id := p.ID
	if id == "" {
		id = bodyID(req.Body)
	}
	e, err := newEvent(Event{Source: "ecr", Host: host, Repository: d.RepositoryName, Tag: d.ImageTag, Digest: d.ImageDigest, DeliveryID: id})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
