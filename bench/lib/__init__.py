"""What the benchmarks share: servers run as subprocesses (`servers`), what /proc says about them (`procs`),
variants measured in interleaved rounds (`rounds`), the tables they print (`tables`), the requests they send
(`payloads`), the commit and machine a result was measured on (`provenance`), wrk and its Lua (`wrk`), a
minimal HTTP mock (`mockhttp`), a streaming client (`streams`), the in-process stage budget (`budget`,
`e2e_report`) and an edge started with the stock encoder (`edge_launcher`).
"""
