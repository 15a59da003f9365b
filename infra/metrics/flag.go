package metrics

// FlagHelp is the help of a role's --metrics flag (the address Serve
// listens on).
const FlagHelp = "serve Prometheus /metrics, /healthz and /readyz on this address (e.g. :9100); empty = off"
