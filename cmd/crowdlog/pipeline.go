package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

// exitCode is an error with the process exit status main uses for it.
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }
func (e exitCode) Unwrap() error { return e.err }

// usageError marks err as invalid usage or configuration (exit status 2).
func usageError(err error) error { return exitCode{2, err} }

// applyConfig is config.Apply with its UsageError a usage error.
func applyConfig(cmd *cobra.Command, environ []string) error {
	err := config.Apply(cmd, environ)
	if errors.As(err, new(config.UsageError)) {
		return usageError(err)
	}
	return err
}

func pipelineCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "pipeline validate|show FILE",
		Short: "Check or print a pipeline file (what is collected and how it is released)",
		Long: `A pipeline file is one YAML document that defines a pipeline: the mining
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

'crowdlog run --pipeline FILE' runs it; its pipeline flags (--app, --policy,
--k, --epsilon, ...) then must not be given.

The pipeline's digest — SHA-256 of the canonical text of the fields that
change what a report means (app and options, policy and its resolved
parameters) — is sealed into every report and carried by every decrypted
item; roles given another definition refuse the data and log both digests.
'show' prints it as a comment. A DP policy needs policy.epsilon and
policy.users: U is public configuration, never counted from an input.

Exit status: 0 valid, 2 invalid (the message names the field and what it
allows), 1 the file cannot be read.`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check a pipeline file; exit 2 naming the field when it is invalid",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := loadPipeline(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: pipeline %s is valid (app %s, policy %s)\n", args[0], p.Name, p.App.Name, p.Policy.Kind)
			return nil
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "show FILE",
		Short: "Print a pipeline file with every default filled in",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := loadPipeline(args[0])
			if err != nil {
				return err
			}
			b, err := p.Show()
			if err != nil {
				return err
			}
			if d, err := p.Digest(); err == nil {
				b = append([]byte("# pipeline digest: "+pipeline.DigestString(d)+"\n"), b...)
			} else {
				b = append([]byte("# pipeline digest: not computable: "+err.Error()+"\n"), b...)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return c
}

// loadPipeline is pipeline.Load with an invalid file as a usage error
// (exit status 2).
func loadPipeline(path string) (*pipeline.Pipeline, error) {
	p, err := pipeline.Load(path)
	if errors.Is(err, pipeline.ErrInvalid) {
		return nil, usageError(err)
	}
	return p, err
}

// pipelineFlag loads the --pipeline file path of a role (nil, nil when
// path is empty), refusing the pipeline flags set beside it.
func pipelineFlag(f *pflag.FlagSet, path string) (*pipeline.Pipeline, error) {
	if path == "" {
		return nil, nil
	}
	if err := conflictingFlags(f); err != nil {
		return nil, err
	}
	return loadPipeline(path)
}

// applyPipelineFile loads the pipeline file path (none when empty) into
// cfg, refusing pipeline flags set beside it (run); an --epoch given
// beside it names the epoch instead of the file's epoch.name (an operator
// runs one pipeline over many epochs).
func applyPipelineFile(f *pflag.FlagSet, path string, cfg *runner.Config) error {
	p, err := pipelineFlag(f, path)
	if err != nil || p == nil {
		return err
	}
	epoch := cfg.Epoch
	runner.ApplyPipeline(cfg, p)
	if f.Changed("epoch") {
		cfg.Epoch, cfg.EpochLength = epoch, 0
	}
	return nil
}

// pipelineFlags are the flags of run whose values a pipeline file gives.
var pipelineFlags = []string{"epoch-length", "app", "url-level", "session-gap", "pair-order", "rank-buckets", "dwell-buckets", "length-buckets",
	"policy", "k", "epsilon", "delta", "d", "users", "count-share", "shamir-k", "slack", "lambda",
	"dataset", "budget-epsilon", "budget-delta", "summary", "tokens", "randomness-tokens", "report-tokens", "partitions"}

// conflictingFlags returns the pipeline flags given on the command line.
func conflictingFlags(f *pflag.FlagSet) error {
	var set []string
	for _, n := range pipelineFlags {
		if fl := f.Lookup(n); fl != nil && fl.Changed {
			set = append(set, "--"+n)
		}
	}
	if len(set) > 0 {
		return usageError(fmt.Errorf("--pipeline gives the pipeline; %s set it too: put them in the file (crowdlog pipeline show prints it) or drop --pipeline",
			strings.Join(set, ", ")))
	}
	return nil
}
