"""Production tables and op-trees that both backends and the layers share (not numpy
definitions of ops, which are ``backends/reference/``'s): the GELU op-trees (``gelu``), the
attention dropout stream, block layouts and visit tables (``attention_tables``), the recurrent
activations and sequence order (``recurrent_steps``), bfloat16 bit conversions
(``bfloat16``), the class-index check (``class_indices``) and block-sparse weights as dense
(``blocksparse_dense``)."""
