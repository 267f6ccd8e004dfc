package webhook

import (
	"fmt"
	"strings"
)

// CloudEvent types that announce registry pushes.
const (
	// CDEventsArtifactPublished is the type prefix of CDEvents artifact.published events, one
	// type per spec version (dev.cdevents.artifact.published.0.2.0, ...).
	CDEventsArtifactPublished = "dev.cdevents.artifact.published."
	// EventGridImagePushed is Azure Event Grid's type for a push to Azure Container Registry.
	EventGridImagePushed = "Microsoft.ContainerRegistry.ImagePushed"
	// EventarcMessagePublished is Eventarc's type for a Pub/Sub message, which carries
	// Artifact Registry and Container Registry notifications from the "gcr" topic.
	EventarcMessagePublished = "google.cloud.pubsub.topic.v1.messagePublished"
)

// ParseCloudEvent parses the data of a registry CloudEvent, already received and decoded from
// binary or structured mode by the caller, given its type, source and id attributes. It
// returns at least one Event, or an error wrapping ErrMalformed or ErrIgnored; types that are
// not registry pushes are ignored. Authentication is the transport's business (broker, trigger
// or push subscription), not this function's.
func ParseCloudEvent(ceType, ceSource, ceID string, data []byte) ([]Event, error) {
	var (
		source string
		events []Event
		err    error
	)
	switch {
	case strings.HasPrefix(ceType, CDEventsArtifactPublished):
		source = "cdevents"
		events, err = parseCDEvent(data, ceID)
	case ceType == EventGridImagePushed:
		source = "eventgrid"
		events, err = parseEventGrid(ceID, data)
	case ceType == EventarcMessagePublished:
		source = "eventarc"
		events, err = parseEventarc(ceSource, ceID, data)
	default:
		return nil, fmt.Errorf("cloudevent: %w", ignored("type %s is not a registry push", quote(ceType)))
	}
	if err == nil && len(events) == 0 {
		err = ignored("no events")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return events, nil
}
