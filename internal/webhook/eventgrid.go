package webhook

// Azure Event Grid's Microsoft.ContainerRegistry.ImagePushed event carries, as its data, the
// same event object that ACR webhooks POST (see acr.go); the CloudEvent id is the delivery id.

func parseEventGrid(ceID string, data []byte) ([]Event, error) {
	return parseACREvent("eventgrid", data, ceID)
}
