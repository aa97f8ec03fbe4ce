"""The contract every destination keeps, one suite parametrized by the vendor registry."""
