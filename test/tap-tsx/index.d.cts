export declare const importLoader: string;
export declare const testFileExtensions: string[];
export declare const plugin: () => object;
