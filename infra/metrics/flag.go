package metrics

import "net"

// FlagHelp is the help of a role's --metrics flag (the address Serve
// listens on; ListenAddr).
const FlagHelp = "serve Prometheus /metrics, /healthz and /readyz on this address; a port alone (:9100) binds loopback (127.0.0.1:9100); " +
	"give 0.0.0.0:9100 for a scraper on another host, which then reads every metric (docs/threat-model.md, \"Whoever reads /metrics\"); empty = off"

// ExactCountsFlag is the flag of the roles whose metrics include the exact
// counts a DP release withholds (WithheldUnderDP): set, they are exported
// even when a served pipeline has a DP policy.
const ExactCountsFlag = "metrics-exact-counts"

// ExactCountsHelp is the help of ExactCountsFlag.
const ExactCountsHelp = "export on /metrics the exact counts a DP release withholds (decrypted reports, pending tags, decrypt waits, the decrypted topic's lag, " +
	"foreign items) also when a served pipeline has a DP policy (dp-a, dp-u, zealous, …). This gives up the DP guarantee towards whoever reads /metrics: " +
	"the difference of two scrapes is the exact number of reports of the artifacts that crossed k between them, and pending tags count the artifacts " +
	"below k, both of which the release's noise and second threshold hide. Threshold pipelines export them without it (release: --policy ft-a or ft-u; " +
	"aggregate: --pipeline files, all ft-a or ft-u)"

// ListenAddr is the address Serve binds for addr: addr itself, or, when
// addr names no host (":9100"), the loopback address 127.0.0.1 at its
// port, so /metrics is reachable only from the host unless an address
// (0.0.0.0:9100, a pod IP) is given.
func ListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}
