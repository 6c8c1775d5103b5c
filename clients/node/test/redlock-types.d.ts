// node-redlock 5.0.0-beta.2 ships types its "exports" do not point to under NodeNext resolution.
declare module "redlock" {
  const Redlock: new (clients: unknown[], settings?: object) => unknown;
  export default Redlock;
}
