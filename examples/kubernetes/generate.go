// Package kubernetes holds the generated manifests of the example's
// resources: CRDs in config/crd, RBAC in config/rbac. `make generate`
// regenerates them with the pinned controller-gen; a test checks that the
// committed files are current.
package kubernetes
