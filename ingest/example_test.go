package ingest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// A program embeds the client: one Device per user's machine, its state in
// a directory the program keeps across restarts. It needs a running
// deployment (examples/embed is the runnable form; TestClientLibrary runs
// it end to end), so this example is compiled, not run.
func ExampleDevice() {
	ctx := context.Background()
	dev, err := ingest.New(ctx, ingest.Config{
		StateDir: "/var/lib/myapp/crowdlog", // user secret per epoch, pinned keys, what was sent
		NATS:     "nats://crowdlog.example:4222",
		KeysDir:  "/etc/myapp/crowdlog-keys", // relay-a.key.pub, relay-b.key.pub, aggregator.key.pub
		Epoch:    "2026-11-24",
		Policy:   star.FTu,
		K:        5,
	})
	if err != nil {
		log.Fatal(err) // the error names the field to fix
	}
	defer dev.Close(ctx)
	searched := time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)
	n, err := dev.Submit(ctx, apps.QueryAppName,
		apps.Artifact{Primary: "made up weather", Secondary: "Made up Weather", Time: searched})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "reports sent") // 0 when this device sent that instance before
}
