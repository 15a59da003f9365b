// Package natsconn is how every crowdlog role and client talks to NATS:
// Connect (reconnecting forever, logging disconnects), RequestJSON (a JSON
// request/reply with a bounded wait) and Replicas (how many copies a stream
// or key-value bucket should have on the deployment a connection reaches).
package natsconn
