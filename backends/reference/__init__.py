"""The numpy definitions of every backend op, one module per section of the backend contract
(``conv``, ``pool``, ``norm``, ``softmax``, ``attention``, ``rows``, ``blocksparse``, ``gelu``,
``lrn``, ``recurrent``, ``optree``).  They take and return numpy arrays; the CPU backend runs
them for every case its C kernels do not take, and the tests compare every backend with them."""
