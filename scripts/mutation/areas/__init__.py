"""The mutants, one file per area: each defines MUTANTS, a list of mutation.Mutant."""
