package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// MaxResponseBytes is the largest Kafka response, in bytes, a plaintext
// connection built by this package accepts: 256 MiB. Every Kafka response
// is an int32 size followed by that many bytes (the Kafka protocol guide,
// "Common Request and Response Structure"); a size above this, or below
// zero, means the peer is not a Kafka broker. The bound is generous: the
// largest fetch this project asks for is 64 MiB (kafka-go
// ReaderConfig.MaxBytes), a fetch may exceed its limit by one record
// batch (KIP-74), bounded by the topic's max.message.bytes (1 MiB by
// default); Kafka's own brokers refuse requests above
// socket.request.max.bytes (100 MiB by default) and franz-go refuses
// responses above BrokerMaxReadBytes (100 MiB by default). A NATS
// greeting ("INFO") read as a size is 1.15 GiB, an HTTP reply ("HTTP")
// 1.13 GiB: both refused.
const MaxResponseBytes = 256 << 20

// ErrNotKafka is wrapped by the error of a connection whose peer announced
// a response size no Kafka broker sends (a NATS server, an HTTP server at
// the address given as a Kafka broker).
var ErrNotKafka = errors.New("not a Kafka broker")

// guardDial returns a dial function for kafka-go (Transport.Dial,
// Dialer.DialFunc) whose connections follow the response framing and fail
// with ErrNotKafka, before kafka-go allocates for it, when the peer
// announces a response size that is negative or above MaxResponseBytes.
// For plaintext connections only: under TLS the dialled connection carries
// TLS records, and a peer that is not Kafka fails the TLS handshake.
func guardDial(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &frameGuard{Conn: c, addr: addr, max: MaxResponseBytes}, nil
	}
}

// frameGuard is a net.Conn that checks the int32 size prefix of every
// response frame read through it. Reads are not concurrent (kafka-go reads
// a connection from one goroutine at a time), so its state needs no lock.
type frameGuard struct {
	net.Conn
	addr string
	max  int32
	hdr  [4]byte // the size prefix read so far
	hdrN int     // bytes of hdr filled
	left int64   // bytes of the current frame's body still to come
	err  error   // the first framing error; every later Read returns it
}

// Read reads from the connection and checks the frame sizes in what it
// read. On a bad size it closes the connection and returns an error
// wrapping ErrNotKafka (and no bytes).
func (g *frameGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.Conn.Read(p)
	if size, bad := g.scan(p[:n]); bad {
		g.err = fmt.Errorf("kafka: the peer at %s is %w: a response of %d bytes announced (max %d); check --kafka (the address of a Kafka broker, not NATS or HTTP)",
			g.addr, ErrNotKafka, size, g.max)
		g.Conn.Close()
		return 0, g.err
	}
	return n, err
}

// scan advances the framing state over b; bad reports a size prefix that
// is negative or above g.max, with the size.
func (g *frameGuard) scan(b []byte) (size int32, bad bool) {
	for len(b) > 0 {
		if g.left > 0 {
			k := int64(len(b))
			if k > g.left {
				k = g.left
			}
			g.left -= k
			b = b[k:]
			continue
		}
		c := copy(g.hdr[g.hdrN:], b)
		g.hdrN += c
		b = b[c:]
		if g.hdrN < len(g.hdr) {
			return 0, false
		}
		g.hdrN = 0
		size = int32(binary.BigEndian.Uint32(g.hdr[:]))
		if size < 0 || size > g.max {
			return size, true
		}
		g.left = int64(size)
	}
	return 0, false
}
