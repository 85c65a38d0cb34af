"""What every layer uses: one-line user errors, atomic writes, precision and device choice,
silencing known library noise, optional extras, and the table of moved module names."""
