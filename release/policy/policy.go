// Package policy holds crowdlog's release policies (CrowdLogging §3.2,
// CrowdLogging §3.2): the threshold policies FT_a and FT_u (exact counts of
// what the aggregator decrypted at k) and the differentially private
// policies DP_a and DP_u (CrowdLogging §3.2.3, after Korolova et al., WWW
// 2009) and ZEALOUS (Götz et al., "Publishing Search Logs — A Comparative
// Study of Privacy Guarantees", Algorithm ZEALOUS and Theorem 3).
//
// A Policy is resolved once from Params: it fixes the Shamir threshold the
// clients seal with (ShamirK), how many artifacts a client may send per
// epoch (Limit), the noise scales, the release threshold and the achieved
// (ε, δ) that the budget ledger records. Decide then turns one item's exact
// counts into a release decision with Laplace noise drawn by
// github.com/google/differential-privacy/go/v3 (secure sampling; never
// hand-rolled floating-point Laplace). The formulas are documented in
// docs/policies.md.
package policy

import (
	"fmt"
	"math"
	"strings"

	"github.com/google/differential-privacy/go/v3/noise"

	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// Kind names a release policy; its string is the CLI spelling and the
// `policy` column of the release tables.
type Kind string

const (
	// FTa releases artifacts with at least k reports, exact counts
	// (CrowdLogging §3.2.1).
	FTa Kind = "ft-a"
	// FTu releases artifacts with at least k distinct users, exact counts
	// (CrowdLogging §3.2.2).
	FTu Kind = "ft-u"
	// DPa is artifact-frequency differential privacy (CrowdLogging §3.2.3):
	// each client sends its d most recent artifact instances; an artifact is
	// released when its report count plus Laplace(b) exceeds k_a; its count
	// is released with Laplace(b_a) noise.
	DPa Kind = "dp-a"
	// DPu is user-frequency differential privacy (CrowdLogging §3.2.3, eq.
	// 1–3): each client sends its d most recent distinct artifacts, once
	// each; the distinct-user count plus Laplace(b) must exceed k_u.
	DPu Kind = "dp-u"
	// Zealous is Algorithm ZEALOUS (Götz et al. §4): each client sends up to
	// m distinct artifacts; the histogram of users per artifact is cut at τ
	// (the Shamir threshold), Laplace(λ) is added and noisy counts below τ'
	// are dropped; Theorem 3 gives (ε, δ)-probabilistic DP.
	Zealous Kind = "zealous"
	// DPSU is crowdlog's DP set-union policy (docs/policies.md, "dp-su"):
	// each client sends one artifact per epoch, the most frequent (most
	// instances in its own log) of its d most recent distinct artifacts —
	// a contribution policy in the sense of Gopi et al., "Differentially
	// Private Set Union", ICML 2020, that needs nothing but the client's own
	// log; the distinct-user count plus Laplace(1/ε) is both the selection
	// (Laplace thresholding, Desfontaines et al., PoPETs 2022 §3) and the
	// released count, so counts cost no extra budget.
	DPSU Kind = "dp-su"
	// DPGSU is crowdlog's Gaussian DP set union (docs/policies.md,
	// "dp-gsu"): each client sends its m most frequent distinct artifacts
	// (most instances in its own log, ties to the more recent), each with
	// the implicit weight 1/√m (L2 sensitivity 1, Gopi et al., ICML 2020
	// §3); the distinct-user count plus N(0, σ²) is both the selection
	// (Gaussian thresholding) and the released count. σ and the threshold
	// are calibrated with the exact Gaussian-mechanism δ (Balle & Wang,
	// ICML 2018, Theorem 8) plus the Shamir-cut crossing term, worst case
	// over how many of the user's artifacts cross the cut.
	DPGSU Kind = "dp-gsu"
)

// Kinds lists every policy in CLI order.
func Kinds() []Kind { return []Kind{FTa, FTu, DPa, DPu, Zealous, DPSU, DPGSU} }

// Parse parses a policy name ("ft-a", "ft-u", "dp-a", "dp-u", "zealous";
// also the paper spellings FT_a, DP_u, …). Errors name the accepted values.
func Parse(s string) (Kind, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "_", "-")) {
	case "ft-a", "fta":
		return FTa, nil
	case "ft-u", "ftu":
		return FTu, nil
	case "dp-a", "dpa":
		return DPa, nil
	case "dp-u", "dpu":
		return DPu, nil
	case "zealous":
		return Zealous, nil
	case "dp-su", "dpsu":
		return DPSU, nil
	case "dp-gsu", "dpgsu":
		return DPGSU, nil
	}
	return "", fmt.Errorf("unknown policy %q: use ft-a, ft-u (exact counts at k), dp-a, dp-u, zealous, dp-su or dp-gsu (noisy counts, see docs/policies.md)", s)
}

// IsDP reports whether k adds noise and spends privacy budget.
func (k Kind) IsDP() bool {
	return k == DPa || k == DPu || k == Zealous || k == DPSU || k == DPGSU
}

// Defaults used by New for zero Params fields.
const (
	// DefaultCountShare is the share of ε that DP_a/DP_u spend on the noisy
	// released counts (b_a); the rest goes to the noisy selection (b).
	DefaultCountShare = 0.5
	// DefaultSlack is c in the derived Shamir threshold
	// k_shamir = max(1, floor(k₀ − c·b)): artifacts up to c noise scales
	// below the paper's threshold k₀ still decrypt, so their noisy count
	// can still win (a count ≥ c·b below a threshold passes it with
	// probability ≤ e^{−c}/2 ≈ 2.5%).
	DefaultSlack = 3.0
)

// DefaultD is the d (or m) a DP policy of kind k gets when Params.D is 0,
// in the flag form and the pipeline file alike: DefaultGaussianSetUnionM
// (20) for dp-gsu, 1 for dp-a, dp-u, zealous and dp-su; 0 for the FT
// kinds.
func DefaultD(k Kind) int {
	switch k {
	case DPGSU:
		return DefaultGaussianSetUnionM
	case DPa, DPu, Zealous, DPSU:
		return 1
	}
	return 0
}

// Params configure a policy. Zero fields take the documented defaults;
// Epsilon and Users have none (public configuration a DP pipeline must
// state).
type Params struct {
	Kind Kind
	// K is the threshold of FT_a/FT_u (1..vss.MaxK). Ignored by DP
	// policies (use ShamirK).
	K int
	// Epsilon is the privacy quota ε > 0 of one release. DP_a/DP_u split it
	// into selection (1−CountShare) and counts (CountShare); ZEALOUS uses it
	// for λ ≥ 2m/ε.
	Epsilon float64
	// Delta is δ; 0 means 1/(Users+1), the CrowdLogging §4 choice. DP_a and
	// DP_u require δ < 1/Users (CrowdLogging §3.2.3, after Korolova et al.);
	// ZEALOUS's probabilistic DP only δ < 1 (Götz et al. use δ = 0.001 with
	// 500,000 users).
	Delta float64
	// D is d (DP_a, DP_u: artifacts per user per epoch; dp-su: the window
	// of most recent distinct artifacts the client picks its one artifact
	// from) or m (ZEALOUS, dp-gsu: distinct artifacts per user); ≥ 1; 0
	// means DefaultD(Kind).
	D int
	// Users is U, the number of users contributing to the epoch: public
	// configuration (the enrolled population the pipeline is planned
	// for), never counted from the data — a count read from the input
	// differs between neighbouring logs and so would δ = 1/(U+1), the
	// thresholds and the noise scales; ≥ 1 for DP policies, no default.
	Users int
	// CountShare is DP_a/DP_u's share of ε for the released counts, in
	// (0, 1); 0 means DefaultCountShare.
	CountShare float64
	// ShamirK overrides the derived Shamir threshold (DP_a/DP_u: k_shamir;
	// ZEALOUS: τ); 0 derives it.
	ShamirK int
	// Slack is c in k_shamir = max(1, floor(k₀ − c·b)) (DP_a/DP_u); 0 means
	// DefaultSlack.
	Slack float64
	// Lambda is ZEALOUS's noise scale λ ≥ 2m/ε; 0 means 2m/ε.
	Lambda float64
}

// Policy is a resolved, validated policy.
type Policy struct {
	Params
	// ShamirK is the threshold clients seal with (1..vss.MaxK): FT's k,
	// DP's k_shamir, ZEALOUS's τ. No artifact with fewer reports (FT_a,
	// DP_a) or distinct users (others) than ShamirK is ever decrypted, hence
	// ever released.
	ShamirK int
	// Threshold is the release threshold on the noisy count: k_a (DP_a), k_u
	// (DP_u), τ' (ZEALOUS); FT: K.
	Threshold float64
	// B is the selection noise scale: b (DP_a/DP_u), λ (ZEALOUS), the
	// Gaussian σ in users (dp-gsu); 0 for FT.
	B float64
	// BA is the released-count noise scale: b_a (DP_a/DP_u), λ (ZEALOUS, the
	// same draw as the selection), σ (dp-gsu, the same draw); 0 for FT.
	BA float64
	// NoiseDelta is dp-gsu's δ_G: the noise library's Gaussian is drawn at
	// (ε, δ_G) with L0 = m, L∞ = 1, which gives σ = B. 0 for the others.
	NoiseDelta float64
	// WorstLifted is dp-gsu's worst case j: how many of the added user's m
	// artifacts cross the Shamir cut in the worst neighbouring pair. 0 for
	// the others.
	WorstLifted int
	// Epsilon and Delta of the achieved guarantee of one release (what the
	// ledger records); 0 for FT.
	AchievedEpsilon, AchievedDelta float64
}

// New validates p and resolves the policy. Errors say which parameter is
// wrong and what to use instead.
//
// DP_a / DP_u (CrowdLogging §3.2.3; Korolova et al. Theorem 1), with
// ε_sel = (1−s)·ε, ε_cnt = s·ε (s = CountShare), Δ = d (DP_a) or 1 (DP_u):
//
//	b = d/ε_sel, b_a = d/ε_cnt,
//	k₀ = Δ − b·ln(2δ/d)     (= d(1 − ln(2δ/d)/ε_sel) for DP_a, 1 − d·ln(2δ/d)/ε_sel for DP_u),
//	k_shamir = max(1, floor(k₀ − c·b))  unless ShamirK is given,
//	threshold T = k₀ + (k_shamir − 1),
//	achieved ε = d·ln α + d/b_a, α = max(e^{1/b}, 1 + 1/(2e^{(T−1)/b} − 1)),
//	achieved δ = (d/2)·e^{(Δ + k_shamir − 1 − T)/b}.
//
// The margin k_shamir − 1 is ours: the Shamir pre-threshold is a
// deterministic cut, so an artifact that the added user lifts from
// k_shamir − 1 (never decrypted) to k_shamir − 1 + Δ passes T with
// probability ½·e^{(k_shamir−1+Δ−T)/b}. Each of the user's ≤ d artifacts is
// either new (0 → ≤ Δ) or crossing the cut or above it in both logs, so the
// union bound takes, per artifact, the larger of the new-artifact term
// (Korolova et al.'s) and the crossing term — the crossing one whenever
// k_shamir ≥ 2 — not their sum (the sum was used before, which cost
// b·ln(1 + e^{−(k_shamir−1)/b}) more in T; docs/policies.md counts what
// the tighter form adds).
//
// DP set union, dp-su (docs/policies.md): one artifact per user, b = 1/ε,
// k_shamir = ShamirK or 2, T = k_shamir + b·ln(1/(2δ)), the noisy count
// is both the selection and the released value (Laplace thresholding);
// achieved ε = 1/b = ε, δ = ½·e^{(k_shamir−T)/b} = δ.
//
// ZEALOUS (Götz et al. Theorem 3, as read in docs/policies.md):
//
//	λ ≥ 2m/ε, τ = k_shamir (default max(1, round(λ)), Proposition 4),
//	τ' = τ + max(−λ·ln(2 − 2e^{−1/λ}), −λ·ln(2δτ/(U·m))),
//	achieved ε = 2m/λ, δ = (U·m/(2τ))·e^{−(τ'−τ)/λ} (≤ the δ asked for).
func New(p Params) (*Policy, error) {
	switch p.Kind {
	case FTa, FTu:
		if p.K < 1 || p.K > vss.MaxK {
			return nil, fmt.Errorf("policy %s: threshold k=%d outside 1..%d", p.Kind, p.K, vss.MaxK)
		}
		return &Policy{Params: p, ShamirK: p.K, Threshold: float64(p.K)}, nil
	case DPa, DPu, Zealous, DPSU, DPGSU:
	default:
		_, err := Parse(string(p.Kind))
		return nil, err
	}
	if !(p.Epsilon > 0) || math.IsInf(p.Epsilon, 0) {
		return nil, fmt.Errorf("policy %s: epsilon %v must be a finite number > 0: set policy.epsilon in the pipeline file or --epsilon (no default; the paper uses ln 10 ≈ 2.303)", p.Kind, p.Epsilon)
	}
	if p.D == 0 {
		p.D = DefaultD(p.Kind)
	}
	if p.D < 1 {
		return nil, fmt.Errorf("policy %s: %s=%d must be ≥ 1 (artifacts per user per epoch)", p.Kind, dName(p.Kind), p.D)
	}
	if p.Users < 1 {
		return nil, fmt.Errorf("policy %s: the number of users U=%d must be ≥ 1: set policy.users in the pipeline file or --users to the population the pipeline is planned for (public configuration; it is never counted from the input, whose count would differ between neighbouring logs)", p.Kind, p.Users)
	}
	if p.Delta == 0 {
		p.Delta = 1 / float64(p.Users+1)
	}
	if p.Kind == Zealous && (!(p.Delta > 0) || p.Delta >= 1) {
		return nil, fmt.Errorf("policy zealous: delta %v must be in (0, 1) (probabilistic DP, Götz et al. §4.2; default 1/(U+1))", p.Delta)
	}
	if p.Kind != Zealous && (!(p.Delta > 0) || p.Delta >= 1/float64(p.Users)) {
		return nil, fmt.Errorf("policy %s: delta %v must be in (0, 1/U) = (0, %.3g) for U=%d users (default 1/(U+1))",
			p.Kind, p.Delta, 1/float64(p.Users), p.Users)
	}
	if p.ShamirK < 0 || p.ShamirK > vss.MaxK {
		return nil, fmt.Errorf("policy %s: Shamir threshold %d outside 1..%d (0 = derive it)", p.Kind, p.ShamirK, vss.MaxK)
	}
	switch p.Kind {
	case Zealous:
		return newZealous(p)
	case DPSU:
		return newSetUnion(p)
	case DPGSU:
		return newGaussianSetUnion(p)
	}
	if p.CountShare == 0 {
		p.CountShare = DefaultCountShare
	}
	if !(p.CountShare > 0 && p.CountShare < 1) {
		return nil, fmt.Errorf("policy %s: count share %v must be in (0, 1): the share of epsilon spent on the noisy released counts", p.Kind, p.CountShare)
	}
	if p.Slack == 0 {
		p.Slack = DefaultSlack
	}
	if p.Slack < 0 || math.IsInf(p.Slack, 0) || math.IsNaN(p.Slack) {
		return nil, fmt.Errorf("policy %s: slack %v must be ≥ 0", p.Kind, p.Slack)
	}
	d := float64(p.D)
	delta := 1.0
	if p.Kind == DPa {
		delta = d
	}
	b := d / ((1 - p.CountShare) * p.Epsilon)
	ba := d / (p.CountShare * p.Epsilon)
	k0 := delta - b*math.Log(2*p.Delta/d)
	ks := p.ShamirK
	if ks == 0 {
		ks = max(1, int(math.Floor(k0-p.Slack*b)))
		ks = min(ks, vss.MaxK)
	}
	t := k0 + float64(ks-1)
	alpha := math.Max(math.Exp(1/b), 1+1/(2*math.Exp((t-1)/b)-1))
	pol := &Policy{Params: p, ShamirK: ks, Threshold: t, B: b, BA: ba,
		AchievedEpsilon: d*math.Log(alpha) + d/ba,
		AchievedDelta:   DeltaDP(p.Kind, p.D, b, t, ks)}
	if float64(ks) > t {
		return nil, fmt.Errorf("policy %s: Shamir threshold %d is above the release threshold %.2f; lower --shamir-k", p.Kind, ks, t)
	}
	return pol, nil
}

// DeltaDP returns the δ of DP_a/DP_u for d, selection scale b, threshold t
// and Shamir threshold ks ≥ 1: (d/2)·e^{(Δ + ks − 1 − t)/b}, Δ = d for DP_a
// and 1 for DP_u (CrowdLogging §3.2.3 eq. 1–2 with the pre-threshold
// margin documented at New).
func DeltaDP(kind Kind, d int, b, t float64, ks int) float64 {
	delta := 1.0
	if kind == DPa {
		delta = float64(d)
	}
	return float64(d) / 2 * math.Exp((delta+float64(max(ks, 1)-1)-t)/b)
}

// DefaultSetUnionShamirK is dp-su's Shamir threshold when ShamirK is 0: the
// smallest that keeps an artifact only one user sent sealed.
const DefaultSetUnionShamirK = 2

// newSetUnion resolves dp-su: one artifact per user (sensitivity 1 in both
// L0 and L∞), b = 1/ε, T = k_shamir + b·ln(1/(2δ)). Outputs for an
// artifact above the cut in both neighbouring logs differ by at most e^{1/b}
// (Laplace density and CDF ratios under a shift of 1); an artifact the
// added user lifts from k_shamir − 1 (never decrypted; with k_shamir = 1:
// from 0, absent) to k_shamir is released with probability
// ½·e^{(k_shamir−T)/b} = δ. Errors: none beyond New's checks.
func newSetUnion(p Params) (*Policy, error) {
	ks := p.ShamirK
	if ks == 0 {
		ks = DefaultSetUnionShamirK
	}
	b := 1 / p.Epsilon
	t := float64(ks) + b*math.Log(1/(2*p.Delta))
	return &Policy{Params: p, ShamirK: ks, Threshold: t, B: b, BA: b,
		AchievedEpsilon: 1 / b,
		AchievedDelta:   0.5 * math.Exp((float64(ks)-t)/b)}, nil
}

// PaperThreshold returns CrowdLogging's threshold for quota eps, δ and d
// (§3.2.3): k_a = d(1 − ln(2δ/d)/ε) for DP_a, k_u = 1 − d·ln(2δ/d)/ε for
// DP_u. It is New's k₀ with all of ε on the selection; `crowdlog simulate`
// uses it as the paper's §4 does.
func PaperThreshold(kind Kind, eps, delta float64, d int) float64 {
	df := float64(d)
	if kind == DPa {
		return df * (1 - math.Log(2*delta/df)/eps)
	}
	return 1 - df*math.Log(2*delta/df)/eps
}

// ZealousTau2 returns τ' = τ + max(−λ·ln(2 − 2e^{−1/λ}), −λ·ln(2δτ/(U·m)))
// (Götz et al. Theorem 3, eq. 5 as read in docs/policies.md).
func ZealousTau2(lambda float64, tau, users, m int, delta float64) float64 {
	a := -lambda * math.Log(2-2*math.Exp(-1/lambda))
	b := -lambda * math.Log(2*delta*float64(tau)/(float64(users)*float64(m)))
	return float64(tau) + math.Max(a, b)
}

func newZealous(p Params) (*Policy, error) {
	m := float64(p.D)
	minLambda := 2 * m / p.Epsilon
	if p.Lambda == 0 {
		p.Lambda = minLambda
	}
	if p.Lambda < minLambda*(1-1e-12) || math.IsInf(p.Lambda, 0) || math.IsNaN(p.Lambda) {
		return nil, fmt.Errorf("policy zealous: lambda %v is below 2m/ε = %v (Götz et al. Theorem 3); raise --lambda or epsilon, or lower --d", p.Lambda, minLambda)
	}
	tau := p.ShamirK
	if tau == 0 {
		tau = min(max(1, int(math.Round(p.Lambda))), vss.MaxK) // Proposition 4: τ = λ minimises τ'
	}
	t2 := ZealousTau2(p.Lambda, tau, p.Users, p.D, p.Delta)
	return &Policy{Params: p, ShamirK: tau, Threshold: t2, B: p.Lambda, BA: p.Lambda,
		AchievedEpsilon: 2 * m / p.Lambda,
		AchievedDelta:   float64(p.Users) * m / (2 * float64(tau)) * math.Exp(-(t2-float64(tau))/p.Lambda)}, nil
}

func dName(k Kind) string {
	if k == Zealous || k == DPGSU {
		return "m"
	}
	return "d"
}

// Sealing returns the protocol policy clients seal with: FT_a's random
// share coordinates for FT_a and DP_a (the threshold counts reports),
// FT_u's user-derived ones for FT_u, DP_u and ZEALOUS (it counts users).
func (p *Policy) Sealing() star.Policy {
	if p.Kind == FTa || p.Kind == DPa {
		return star.FTa
	}
	return star.FTu
}

// Limit returns the client-side limit: at most n artifacts per user per
// epoch (0 = no limit), the most recent ones; distinct means n distinct
// artifacts, one report each (DP_u, ZEALOUS), otherwise n instances (DP_a).
func (p *Policy) Limit() (n int, distinct bool) {
	switch p.Kind {
	case DPa:
		return p.D, false
	case DPu, Zealous, DPGSU:
		return p.D, true
	case DPSU:
		return 1, true
	}
	return 0, false
}

// Window returns the candidate window of the frequency rules: dp-su sends
// the most frequent of its Window most recent distinct artifacts (Limit()
// = 1 distinct); dp-gsu its m most frequent of all its distinct artifacts
// (Window = AllArtifacts). 0 for every other policy (no window: the Limit
// most recent).
func (p *Policy) Window() int {
	switch p.Kind {
	case DPSU:
		return p.D
	case DPGSU:
		return AllArtifacts
	}
	return 0
}

// AllArtifacts is the Window that takes every distinct artifact of the
// client's epoch as a candidate (dp-gsu).
const AllArtifacts = math.MaxInt32

// Padded reports whether every client sends exactly Limit() reports per
// epoch, padding with dummy reports that never decrypt (dp-gsu), so that
// the number of reports does not tell the aggregator the size of a
// user's log.
func (p *Policy) Padded() bool { return p.Kind == DPGSU }

// PerUnitCap is the most reports one pseudonymous unit (one user, one
// artifact) may add to an artifact's count under DP_a: d. The release
// stage caps counts with it, so several devices of one user cannot push an
// artifact past d. 0 = no cap.
func (p *Policy) PerUnitCap() int {
	if p.Kind == DPa {
		return p.D
	}
	return 0
}

// String describes the resolved policy for logs (parameters only).
func (p *Policy) String() string {
	if !p.Kind.IsDP() {
		return fmt.Sprintf("%s k=%d", p.Kind, p.ShamirK)
	}
	if p.Kind == DPGSU {
		return fmt.Sprintf("%s m=%d ε=%.4g δ=%.3g U=%d shamir_k=%d threshold=%.3f sigma=%.4g noise_delta=%.4g worst_lifted=%d achieved(ε=%.4g, δ=%.4g)",
			p.Kind, p.D, p.Epsilon, p.Delta, p.Users, p.ShamirK, p.Threshold, p.B, p.NoiseDelta, p.WorstLifted, p.AchievedEpsilon, p.AchievedDelta)
	}
	return fmt.Sprintf("%s %s=%d ε=%.4g δ=%.3g U=%d shamir_k=%d threshold=%.3f b=%.4g b_a=%.4g achieved(ε=%.4g, δ=%.3g)",
		p.Kind, dName(p.Kind), p.D, p.Epsilon, p.Delta, p.Users, p.ShamirK, p.Threshold, p.B, p.BA, p.AchievedEpsilon, p.AchievedDelta)
}

// Outcome is the decision on one artifact.
type Outcome struct {
	// Released reports whether the artifact is published.
	Released bool
	// Selection is the noisy count compared with Threshold.
	Selection float64
	// Value is the noisy released count before rounding (DP_a: reports,
	// DP_u/ZEALOUS: users; FT: exact).
	Value float64
	// Impressions and Users are the released columns: DP_a Impressions =
	// round(Value) clamped at 0 and Users = 0 (not measured under DP_a);
	// DP_u, ZEALOUS, dp-su and dp-gsu both = round(Value) (each user sent the artifact at
	// most once, so reports = users); FT the exact counts.
	Impressions, Users uint64
}

// Decide decides on one artifact with exact counts reports (already capped
// per unit, see PerUnitCap) and users. FT: released when the count reaches
// K. DP_a: Selection = reports + Lap(b) > k_a, Value = reports + Lap(b_a).
// DP_u: Selection = users + Lap(b) > k_u, Value = users + Lap(b_a).
// ZEALOUS: steps 3–5 of the algorithm: users < τ is dropped, Selection =
// Value = users + Lap(λ) must be ≥ τ'. dp-su: Selection = Value = users +
// Lap(1/ε) must exceed T. dp-gsu: Selection = Value = users + N(0, σ²)
// (Gaussian) must exceed T. Artifacts below ShamirK are never
// released (they could not have been decrypted). Errors come from the noise
// library (invalid scale) only.
func (p *Policy) Decide(reports, users uint64) (Outcome, error) {
	count := float64(users)
	if p.Kind == FTa || p.Kind == DPa {
		count = float64(reports)
	}
	if count < float64(p.ShamirK) {
		return Outcome{}, nil
	}
	switch p.Kind {
	case FTa, FTu:
		return Outcome{Released: true, Selection: count, Value: count, Impressions: reports, Users: users}, nil
	case Zealous, DPSU, DPGSU:
		var v float64
		var err error
		if p.Kind == DPGSU {
			v, err = Gaussian(count, p.D, p.Epsilon, p.NoiseDelta)
		} else {
			v, err = Laplace(count, p.B)
		}
		if err != nil {
			return Outcome{}, err
		}
		// ZEALOUS keeps noisy counts ≥ τ', dp-su those > T
		o := Outcome{Selection: v, Value: v, Released: v > p.Threshold || (p.Kind == Zealous && v == p.Threshold)}
		if o.Released {
			o.Users = round(v)
			o.Impressions = o.Users
		}
		return o, nil
	}
	sel, err := Laplace(count, p.B)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Selection: sel, Released: sel > p.Threshold}
	if !o.Released {
		return o, nil
	}
	if o.Value, err = Laplace(count, p.BA); err != nil {
		return Outcome{}, err
	}
	o.Impressions = round(o.Value)
	if p.Kind == DPu {
		o.Users = o.Impressions
	}
	return o, nil
}

// Laplace returns x + Lap(scale) drawn by the google/differential-privacy
// library's secure Laplace mechanism (geometric sampling on a grid, crypto
// randomness): AddNoiseFloat64 with L0 = 1, L∞ = 1, ε = 1/scale.
func Laplace(x, scale float64) (float64, error) {
	v, err := noise.Laplace().AddNoiseFloat64(x, 1, 1, 1/scale, 0)
	if err != nil {
		return 0, fmt.Errorf("policy: Laplace noise with scale %v: %w", scale, err)
	}
	return v, nil
}

// round rounds v to the nearest integer, clamping negatives to 0.
func round(v float64) uint64 {
	if !(v > 0) {
		return 0
	}
	return uint64(math.Round(v))
}
