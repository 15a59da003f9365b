package natsconn

import (
	"github.com/nats-io/nats.go"
)

// MaxReplicas is the most copies Replicas asks JetStream to keep.
const MaxReplicas = 3

// Replicas returns how many copies of crowdlog's JetStream streams and
// key-value buckets to keep on the NATS deployment nc is connected to: 1 on a
// single server, and min(MaxReplicas, servers known to nc) when the server
// belongs to a cluster (it reports a cluster name). Known servers are the
// seed URLs plus those the cluster announced (nc.Servers), so a 3-node
// cluster gives 3 whether one or all three URLs were given. A nil nc gives 1.
func Replicas(nc *nats.Conn) int {
	if nc == nil || nc.ConnectedClusterName() == "" {
		return 1
	}
	return max(1, min(MaxReplicas, len(nc.Servers())))
}
