package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/randomness"
)

// randomnessOpenCmd is `crowdlog randomness open-epoch`: the operator's
// action that opens a named epoch (randomness.Keys.OpenEpoch). Register it
// beside randomnessCloseCmd in randomnessCmd.
func randomnessOpenCmd() *cobra.Command {
	var keys, epoch string
	c := &cobra.Command{
		Use:   "open-epoch --keys DIR --epoch NAME",
		Short: "Open a named epoch at the randomness service: create its OPRF key so clients are served",
		Long: `open-epoch creates the epoch's OPRF key (RFC 9497, ristretto255) in
DIR/` + keydir.RandomnessKeys + `/NAME.key (mode 0600) and prints its public key, which
clients pin (publish it out of band, e.g. in their pin files, to detect a
service that shows clients different keys).

With named epochs (randomness --epoch-length 0, the default) the service
never creates a key for a request: a client asking for an epoch that was not
opened is refused ("epoch not opened"), so no client can make the service
create key files. Open each epoch before its clients start; running
randomness processes sharing the directory serve it from their next request
on. Opening an open epoch again changes nothing; a closed epoch is never
reopened (open a new name). With --epoch-length the schedule opens its
epochs and this command is not needed. 'crowdlog run' without --external
opens its own epoch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := logger()
			if err := keydir.RequireRole(keys, "randomness open-epoch", keydir.RoleRandomness); err != nil {
				return err
			}
			k, err := randomness.Open(filepath.Join(keys, keydir.RandomnessKeys), randomness.Options{Logger: log})
			if err != nil {
				return err
			}
			pub, created, err := k.OpenEpoch(epoch)
			if err != nil {
				return fmt.Errorf("open epoch %s in %s: %w", epoch, k.Dir(), err)
			}
			state := "opened"
			if !created {
				state = "was already open"
			}
			fmt.Printf("epoch %s %s in %s; OPRF public key %x\n", epoch, state, k.Dir(), pub)
			return nil
		},
	}
	c.Flags().StringVar(&keys, "keys", "keys", "keys directory of the randomness service")
	c.Flags().StringVar(&epoch, "epoch", "", "epoch to open (1-64 letters, digits, '.', '_', '-')")
	c.MarkFlagRequired("epoch")
	return c
}
