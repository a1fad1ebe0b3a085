"""streamscope-trace: convert, validate and explain streamscope and LitData trace logs."""
