"""The assembler's fold: sync assignments → per-cluster RemoteAssemblage/ProxyAssemblage
snapshots. Pure; reads the engine's outcomes and the wire documents."""
