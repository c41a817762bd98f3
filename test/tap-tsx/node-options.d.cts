export declare const PROCESSINFO: RegExp;
export declare function withoutProcessinfoImport(args: readonly string[]): string[];
export declare function splitNodeOptions(text: string): string[];
export declare function withoutProcessinfo(nodeOptions: string | undefined): string | undefined;
