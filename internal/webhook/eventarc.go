package webhook

import "strings"

// Eventarc wraps a Pub/Sub message as a messagePublished CloudEvent whose data is the same
// envelope a push subscription delivers, and whose source names the topic. Artifact Registry
// and Container Registry publish only to a topic named "gcr"; messages from other topics are
// someone else's and are ignored.

func parseEventarc(ceSource, ceID string, data []byte) ([]Event, error) {
	if ceSource != "" && !strings.HasSuffix(ceSource, "/topics/gcr") {
		return nil, ignored("source %s is not a gcr topic", quote(ceSource))
	}
	return parsePubSub("eventarc", data, ceID)
}
