// The pod sandbox ("pause") image's only process: it holds the pod's namespaces and waits to be stopped.
// scripts/image builds it statically, because no registry with registry.k8s.io/pause can be reached here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
