// Package v1 holds the image.toolkit.fluxcd.io/v1 API types that reflector serves: ImageRepository
// and ImagePolicy, field for field as Flux's image-reflector-controller serves them, so that Flux
// tooling reads and writes them unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=image.toolkit.fluxcd.io
package v1
