// The API page (/docs): Swagger UI over this server's own OpenAPI schema. Swagger UI is the classic script the page
// loads before this module (from the fastapi-offline package, served by this server: no CDN, works offline).

/* global SwaggerUIBundle */
SwaggerUIBundle({
  url: "openapi.json",  // relative to /docs, so that it stays under a proxy's prefix
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,  // (its badge would ask validator.swagger.io about the schema)
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
