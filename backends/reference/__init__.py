"""The numpy definitions of every backend op, one module per section of the backend contract
(``conv``, ``pool``, ``norm``, ``softmax``, ``gelu``, ``attention``, ``rows``, ``blocksparse``, ``lrn``,
``recurrent``, ``optree``), and nothing else: the tables production code shares with them are
``backends/shared/``'s.  They take and return numpy arrays; the CPU backend runs them for every
case its C kernels do not take, and the tests compare every backend with them."""
