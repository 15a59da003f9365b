#!/usr/bin/env bash
# SogouQ (Sogou Labs' query log, 2008; GB18030 lines "HH:MM:SS <tab> user
# <tab> [query] <tab> rank order <tab> url") for `crowdlog pdd`, and an
# independent count of its daily keyword instances. No pipeline code: iconv,
# awk, sort. SogouQ has times of day only; every row gets the nominal date
# DATE (default 2008-06-01), so the log is one day.
#
#   scripts/sogouq.sh tsv SOGOUQ [DATE] > sogouq.tsv    # AOL TSV (AnonID Query QueryTime ItemRank ClickURL)
#   scripts/sogouq.sh keywords sogouq.tsv N > zh.txt    # the N most frequent 2–4-ideograph substrings
#   scripts/sogouq.sh count sogouq.tsv zh.txt           # "keyword<TAB>count" per non-zero keyword, then "cells N total T"
#
# keywords: a substring counts once per query instance (a run of one user's
# consecutive identical queries), over runs of Han ideographs (UTF-8 lead
# bytes E4–E9, U+4000–U+9FFF); ties are broken by byte order.
# count: the instances of each keyword (index() of the keyword in the
# lower-cased query, once per instance), i.e. PDD mode's daily count of a
# keyword made of ideographs only (docs/pdd.md, "Keywords in scripts
# without spaces").
set -euo pipefail
export LC_ALL=C
cmd=${1:?usage: scripts/sogouq.sh tsv|keywords|count ...}
shift
case $cmd in
tsv)
	src=${1:?SogouQ file}
	date=${2:-2008-06-01}
	printf 'AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n'
	iconv -f GB18030 -t UTF-8 "$src" | awk -F'\t' -v d="$date" 'BEGIN { OFS = "\t" }
		NF >= 3 { q = $3; sub(/^\[/, "", q); sub(/\]$/, "", q); split($4, r, " ");
		          print $2, q, d " " $1, r[1], $5 }'
	;;
keywords)
	tsv=${1:?TSV from "tsv"}
	n=${2:?N}
	awk -F'\t' 'NR > 1 {
		q = tolower($2); if (q == last[$1]) next; last[$1] = q
		delete seen
		L = length(q)
		for (i = 1; i <= L; i++) {
			for (k = 2; k <= 4; k++) {
				s = substr(q, i, 3 * k); if (length(s) < 3 * k) break
				ok = 1
				for (j = 0; j < k; j++) { c = substr(s, 3 * j + 1, 1); if (c < "\344" || c > "\351") { ok = 0; break } }
				if (!ok) break
				if (!(s in seen)) { seen[s] = 1; cnt[s]++ }
			}
		}
	} END { for (s in cnt) print cnt[s] "\t" s }' "$tsv" | sort -t"$(printf '\t')" -k1,1nr -k2,2 | awk -v n="$n" 'NR <= n' | cut -f2
	;;
count)
	tsv=${1:?TSV from "tsv"}
	list=${2:?keyword list}
	awk -F'\t' 'FNR == NR { if ($0 != "" && $0 !~ /^#/) kw[++nk] = $0; next }
		FNR > 1 {
			q = tolower($2); gsub(/^ +| +$/, "", q); if (q == "" || q == "-" || q == last[$1]) next; last[$1] = q
			for (i = 1; i <= nk; i++) if (index(q, kw[i])) c[kw[i]]++
		} END { for (w in c) { cells++; total += c[w]; print w "\t" c[w] } print "cells " cells " total " total }' "$list" "$tsv"
	;;
*)
	echo "unknown command $cmd: use tsv, keywords or count" >&2
	exit 2
	;;
esac
