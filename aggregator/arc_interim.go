package aggregator

import (
	"github.com/cloudflare/circl/group"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// INTERIM until protocol/star/arc.go lands: star's ARC definitions from
// the report's fields.
func reportARCContext(r *star.Report) []byte {
	b := []byte("crowdlog-v1 arc")
	b = append(b, byte(len(r.App)))
	b = append(b, r.App...)
	b = append(b, byte(len(r.Epoch)))
	b = append(b, r.Epoch...)
	b = append(b, byte(r.Policy), byte(r.K>>8), byte(r.K))
	return append(b, r.Tag[:]...)
}

func shareXFromARC(tag []byte) group.Scalar {
	return protocol.G.HashToScalar(append([]byte("crowdlog-v1 arc x"), tag...), []byte("crowdlog-v1 arc x"))
}
