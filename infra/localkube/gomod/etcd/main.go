// Command etcd is the upstream etcd server, built from go.etcd.io/etcd/server/v3 as a library
// (`go install` refuses the server module because of its replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
