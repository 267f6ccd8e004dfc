package webhook

import (
	"encoding/hex"
	"strings"
)

// JFrog Artifactory sends docker-domain webhooks whose data names the Artifactory repository
// (repo_key), the image (image_name) and the tag. By default the image is taken to be served
// the "repository path" way, JFrog's default: <host of jpd_origin>/<repo_key>/<image_name>.
// Installations that serve a Docker repository under its own host (subdomain or port method)
// or behind another name set ?host=<host[:port]>[/<path prefix>] on the webhook URL; the image
// is then <host>/<prefix>/<image_name>, and repo_key is not used.

type jfrogPayload struct {
	Domain    string `json:"domain"`
	EventType string `json:"event_type"`
	JPDOrigin string `json:"jpd_origin"`
	Data      struct {
		RepoKey   string `json:"repo_key"`
		ImageName string `json:"image_name"`
		Tag       string `json:"tag"`
		// SHA256 is the checksum of the manifest file, which is the manifest's digest.
		SHA256 string `json:"sha256"`
	} `json:"data"`
}

func parseJFrog(req Request) ([]Event, error) {
	var p jfrogPayload
	if err := decodeJSON(req.Body, &p); err != nil {
		return nil, err
	}
	if p.Domain != "docker" {
		return nil, ignored("domain %s is not docker", quote(p.Domain))
	}
	if p.EventType != "pushed" {
		return nil, ignored("docker event %s is not a push", quote(p.EventType))
	}
	d := p.Data
	if d.Tag == "" {
		return nil, ignored("untagged push")
	}
	if d.ImageName == "" {
		return nil, malformed("no data.image_name")
	}
	host, prefix := hostParam(req.Query)
	repository := joinPath(prefix, d.ImageName)
	if host == "" {
		host = urlHost(p.JPDOrigin)
		if host == "" {
			return nil, malformed("no registry host: the payload has no jpd_origin; add ?host=<registry host>[/<path prefix>] to the webhook URL")
		}
		if d.RepoKey == "" {
			return nil, malformed("no data.repo_key")
		}
		repository = joinPath(d.RepoKey, d.ImageName)
	}
	digest := ""
	if sum := strings.ToLower(d.SHA256); len(sum) == 64 && isHex(sum) {
		digest = "sha256:" + sum
	}
	e, err := newEvent(Event{Source: "jfrog", Host: host, Repository: repository, Tag: d.Tag, Digest: digest, DeliveryID: bodyID(req.Body)})
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}
