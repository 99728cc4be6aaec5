package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/lcd"
)

func newCompatCommand() *cobra.Command {
	var printLCD bool
	cmd := &cobra.Command{
		Use:   "compat OLD.yaml NEW.yaml [--lcd]",
		Short: "Check that a CRD is compatible with another, or print their least common denominator",
		Long: `compat compares two CustomResourceDefinitions of the same resource.

Without --lcd it checks that NEW accepts everything OLD accepts (a safe
update: no field removed, no type changed, nothing newly required, no
enum value or bound narrowed) and lists every place where it does not,
with its path. It exits 0 when NEW is compatible, 1 when not.

With --lcd it prints (YAML, on stdout) the least common denominator: the
definition that accepts exactly what both accept, in the versions both
serve; what one side lacks is dropped and listed on stderr. This is what
kcp publishes when physical clusters offer a resource with different
schemas. It exits 1 when there is none (a type conflict: the same field
is a string in one and an object in the other, different groups, names
or scope).`,
		Example: `  kcp compat widgets-v1.yaml widgets-v2.yaml
  kcp compat cluster-a.yaml cluster-b.yaml --lcd > negotiated.yaml`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			old, err := readCRD(args[0])
			if err != nil {
				return err
			}
			new, err := readCRD(args[1])
			if err != nil {
				return err
			}
			out, problems := lcd.CRDs(old, new)
			for _, p := range problems {
				fmt.Fprintln(cmd.ErrOrStderr(), p)
			}
			if printLCD {
				if out == nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s and %s have no common denominator\n", args[0], args[1])
					os.Exit(1)
					return nil
				}
				b, err := yaml.Marshal(out)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if len(problems) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s is not compatible with %s: %d problem(s)\n", args[1], args[0], len(problems))
				os.Exit(1)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is compatible with %s\n", args[1], args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&printLCD, "lcd", false, "print the least common denominator of the two definitions instead of checking compatibility")
	return cmd
}

func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return nil, fmt.Errorf("%s: not a CustomResourceDefinition: %v", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", path, crd.Kind)
	}
	return &crd, nil
}
