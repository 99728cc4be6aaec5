// Command kcp is the kcp on SQL server and its tools.
package main

import (
	"os"

	"k8s.io/component-base/cli"
)

func main() {
	os.Exit(cli.Run(newRootCommand()))
}
