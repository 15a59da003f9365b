package pipeline

// Help is the help of `crowdlog pipeline`: what a pipeline file holds.
const Help = `A pipeline file is one YAML document that defines a pipeline: the mining
application and its options, the release policy and its parameters, the
privacy budget, the epoch, the token budgets and the topics' partitions.
Unknown or misspelled fields are errors. Examples: testdata/pipelines/.

  name: query-ftu-k5        # 1–64 of [A-Za-z0-9._-]
  app:
    name: query             # query, reformulation, click, url, ltr, keyword
  policy:
    kind: ft-u              # ft-u, ft-a, dp-a, dp-u, zealous, dp-su, dp-gsu
    k: 5                    # ft-u/ft-a; DP: epsilon and users (required), delta, d, shamir_k, ...
  epoch:
    length: 168h            # optional: weekly epochs named START-168h (or name: 2006-03)
  pdd:                      # optional: how 'crowdlog pdd --pipeline FILE' counts keywords
    mode: prio3             # groups (default; group_size: 100) or prio3
    bits: 4                 # prio3: counts clipped to 2^bits − 1 (or measurement: presence, max_weight: W)
    min_batch_size: 10      # prio3: fewest reports a day is released with
    l1: 20                  # prio3 counts: bound S on a client's daily sum; noise scale S/ε
    exact_shares: false     # prio3: exact shares (ε 0); a malicious leader could then read a client

'crowdlog run --pipeline FILE' runs it; its pipeline flags (--app, --policy,
--k, --epsilon, ...) then must not be given. 'crowdlog pdd --pipeline FILE'
reads the pdd section; --mode, --group-size, --measurement, --bits,
--max-weight, --chunk, --min-batch-size, --l1 and --exact-shares then must
not be given.

The pipeline's digest — SHA-256 of the canonical text of the fields that
change what a report means (app and options, policy and its resolved
parameters) — is sealed into every report and carried by every decrypted
item; roles given another definition refuse the data and log both digests.
'show' prints it as a comment. A DP policy needs policy.epsilon and
policy.users: U is public configuration, never counted from an input.

Exit status: 0 valid, 2 invalid (the message names the field and what it
allows), 1 the file cannot be read.`
