"""Built-in kernel providers: the compiled kernels and the pure-torch reference."""
