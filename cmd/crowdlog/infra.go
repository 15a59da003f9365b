package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
)

func clickhouseCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "clickhouse --dir DIR",
		Short: "Start a local ClickHouse server from a directory (for demos and one-machine use)",
		Long: `clickhouse starts Debian's clickhouse-server with its own config in DIR
(127.0.0.1 only, free ports, data kept in DIR across restarts), writes the
addresses to DIR/addr.env (CH_TCP=host:port, CH_TCP_PORT, CH_HTTP) and runs
until interrupted. Needs: apt-get install -y clickhouse-server clickhouse-client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return err
			}
			s, err := clickhouse.Start(cmd.Context(), abs)
			if err != nil {
				return err
			}
			defer s.Stop()
			env, err := s.WriteAddrEnv(abs)
			if err != nil {
				return err
			}
			fmt.Print(env)
			select {
			case <-cmd.Context().Done():
			case <-s.Done():
				return fmt.Errorf("clickhouse-server exited; see %s", s.LogPath)
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "clickhouse-data", "server directory (config, data, logs)")
	return c
}
