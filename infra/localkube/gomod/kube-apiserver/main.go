// Command kube-apiserver is the upstream API server, built from k8s.io/kubernetes as a library
// so the test suite needs only the Go module proxy (no release downloads, no Docker).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
